package redis

import (
	"testing"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

func TestConformanceSingleNode(t *testing.T) {
	client := singleClient(t)
	storetest.RunWith(t, func(t *testing.T) limiter.Store { return newStore(t, client, Config{}) }, storetest.Options{NoResetAll: true})
}

func TestConformanceSingleNodeNoEvalSHA(t *testing.T) {
	client := singleClient(t)
	storetest.RunWith(t, func(t *testing.T) limiter.Store {
		s := newStore(t, client, Config{})
		s.cfg.EvalSHA = nil
		return s
	}, storetest.Options{Algorithms: []limiter.Algorithm{limiter.SlidingLog}, NoResetAll: true})
}

func TestConformanceCluster(t *testing.T) {
	addrs := testenv.RedisCluster(t)
	client := clusterClient(t, addrs)
	t.Run("key-by-key", func(t *testing.T) {
		storetest.RunWith(t, func(t *testing.T) limiter.Store {
			s := newStore(t, client, Config{})
			if !s.cfg.Cluster {
				t.Fatal("GoRedis did not set Cluster for a *ClusterClient")
			}
			return s
		}, storetest.Options{NoResetAll: true})
	})
	t.Run("hash-tag", func(t *testing.T) {
		storetest.RunWith(t, func(t *testing.T) limiter.Store { return newStore(t, client, Config{HashTag: "conformance"}) }, storetest.Options{NoResetAll: true})
	})
}
