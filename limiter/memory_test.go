package limiter_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) limiter.Store {
		m := limiter.NewMemory(limiter.MemoryConfig{})
		t.Cleanup(func() { m.Close() })
		return m
	})
}
