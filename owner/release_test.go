package owner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// staticMembers is a fixed ring: these tests are about routing, not
// membership, so the ring must not move under them.
type staticMembers struct {
	ring  *ring.Ring
	addrs map[string]string
}

func (s *staticMembers) Ring() *ring.Ring { return s.ring }
func (s *staticMembers) Addr(name string) (string, bool) {
	a, ok := s.addrs[name]
	return a, ok
}

// startRouters runs one Router per name, each serving the peer service on
// a real gRPC server on 127.0.0.1, all on one static ring.
func startRouters(t *testing.T, names ...string) map[string]*Router {
	t.Helper()
	rg, err := ring.New(names, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	members := &staticMembers{ring: rg, addrs: map[string]string{}}
	lis := map[string]net.Listener{}
	for _, n := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[n] = l
		members.addrs[n] = l.Addr().String()
	}
	dial := func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	out := map[string]*Router{}
	var srvs []*grpc.Server
	var engines []*limiter.Memory
	// Routers close first (a closing router hands its counters to peers
	// that are still serving), then the servers and engines.
	t.Cleanup(func() {
		for _, r := range out {
			r.Close()
		}
		for _, s := range srvs {
			s.Stop()
		}
		for _, e := range engines {
			e.Close()
		}
	})
	for _, n := range names {
		engine := limiter.NewMemory(limiter.MemoryConfig{})
		r, err := New(Config{
			Self: n, SelfAddr: members.addrs[n], Members: members, Engine: engine,
			Dial: dial, Replication: 0, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		r.RingChanged(nil, rg)
		srv := grpc.NewServer()
		pb.RegisterPeerServer(srv, r.PeerServer())
		go srv.Serve(lis[n])
		srvs, engines = append(srvs, srv), append(engines, engine)
		out[n] = r
	}
	return out
}

// keyOwnedBy returns a key the ring gives to owner.
func keyOwnedBy(t *testing.T, r *Router, owner, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, _ := r.ring().Owner(k); o == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

// A refused batch gives back what its other parts recorded at the node
// that recorded them, even when a part was passed on and recorded further
// along than the node it was sent to. Here a's part went to b (a had
// handed the key to b on a first-use fetch, b's ring still says a owns
// it), b passed it back, and a recorded it: giving it back to b, as the
// rollback once did, freed nothing and left the use counted.
func TestRefusedBatchGivesBackWhereRecorded(t *testing.T) {
	rs := startRouters(t, "a", "b", "c")
	a := rs["a"]
	free := limiter.Limit{Uses: 5, Window: time.Minute}
	spent := limiter.Limit{Uses: 1, Window: time.Minute}
	kA := keyOwnedBy(t, a, "a", "free")
	kC := keyOwnedBy(t, a, "c", "spent")
	ctx := context.Background()
	if v, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: kC, Limit: spent}}); err != nil || !v.Allowed {
		t.Fatalf("spend %s: %+v %v", kC, v, err)
	}
	a.moved.add(kA, "b", time.Minute)

	v, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: kA, Limit: free}, {Key: kC, Limit: spent}})
	if err != nil || v.Allowed {
		t.Fatalf("batch: %+v %v; want refused", v, err)
	}
	for _, n := range []string{"a", "b"} {
		v, err := rs[n].engine.PeekMany(ctx, []limiter.Entry{{Key: kA, Limit: free, Cost: 5}})
		if err != nil || !v.Allowed {
			t.Errorf("%s at %s after the refused batch: %+v %v; want all 5 uses free", kA, n, v, err)
		}
	}
}
