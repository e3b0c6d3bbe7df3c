package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/member"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// storeNode is an api.Node over one store (a single process).
type storeNode struct{ limiter.Store }

func (storeNode) Local([]limiter.Entry) bool          { return true }
func (storeNode) Members() []member.Member            { return nil }
func (storeNode) RingVersion() uint64                 { return 0 }
func (storeNode) Owner(string) (member.Member, error) { return member.Member{}, nil }

// resetNode is storeNode with the store's Reset (a node whose store can).
type resetNode struct{ storeNode }

func (n resetNode) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	return limiter.Reset(ctx, n.Store, keys, limits...)
}

func newResetServer(t *testing.T, node Node) (*Server, *http.ServeMux) {
	t.Helper()
	s, err := New(Config{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Mount(mux)
	return s, mux
}

func post(mux *http.ServeMux, path, body string) (int, string) {
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

// POST /v1/reset forgets the named counter (or every window of the key),
// answers 200 {"reset": n}, 400 naming the field for bad input, and 501
// when the node's store cannot reset.
func TestJSONReset(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{})
	defer m.Close()
	_, mux := newResetServer(t, resetNode{storeNode{m}})
	ctx := context.Background()
	l, _ := limiter.ParseLimit("1/1h")
	other, _ := limiter.ParseLimit("token-bucket:1/1h")
	full := func(key string, l limiter.Limit) bool {
		v, _ := limiter.Peek(ctx, m, key, l)
		return !v.Allowed
	}
	for _, k := range []string{"ann", "bob"} {
		for _, lim := range []limiter.Limit{l, other} {
			if _, err := limiter.Consume(ctx, m, k, lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, body := post(mux, "/v1/reset", `{"keys":["ann"],"limits":["7/1h"]}`)
	var res JSONResetResult
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.Reset != 1 {
		t.Fatalf("reset of ann's 1h sliding log: %d %s; want 200 {\"reset\":1}", code, body)
	}
	if full("ann", l) || !full("ann", other) || !full("bob", l) {
		t.Fatal("the reset forgot the wrong counters: want ann's sliding log only")
	}
	if code, body := post(mux, "/v1/reset", `{"keys":["ann","bob"]}`); code != http.StatusOK {
		t.Fatalf("reset of every window: %d %s", code, body)
	}
	if full("ann", other) || full("bob", l) || full("bob", other) {
		t.Fatal("a reset without limits left a counter")
	}
	for _, c := range []struct{ body, field string }{
		{`{"keys":[]}`, "keys"},
		{`{"keys":["a",""]}`, "keys[1]"},
		{`{"keys":["a"],"limits":["5/1x"]}`, "limits[0]"},
		{`{"keys":["a"],"limit":"5/1m"}`, "body"},
		{`{"keys":[5]}`, "keys[0]"},
	} {
		code, body := post(mux, "/v1/reset", c.body)
		var p struct{ Field string }
		_ = json.Unmarshal([]byte(body), &p)
		if code != http.StatusBadRequest || !strings.HasPrefix(p.Field, c.field) {
			t.Errorf("%s: %d %s; want 400 naming %s", c.body, code, body, c.field)
		}
	}

	kbk, err := limiter.NewKeyByKey(func(context.Context, limiter.Entry) (limiter.Verdict, error) { return limiter.Verdict{}, nil }, limiter.KeyByKeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, unsupported := newResetServer(t, storeNode{kbk})
	if code, body := post(unsupported, "/v1/reset", `{"keys":["a"]}`); code != http.StatusNotImplemented || !strings.Contains(body, "cannot reset") {
		t.Fatalf("reset on a node whose store cannot: %d %s; want 501 saying so", code, body)
	}
}

// The gRPC Reset: done, INVALID_ARGUMENT naming the field, UNIMPLEMENTED
// for a store that cannot; the error comes back matching
// limiter.ErrUnsupported.
func TestGRPCReset(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{})
	defer m.Close()
	s, _ := newResetServer(t, resetNode{storeNode{m}})
	ctx := context.Background()
	l := limiter.Limit{Uses: 1, Window: time.Hour}
	if _, err := limiter.Consume(ctx, m, "k", l); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reset(ctx, rpc.ResetToPB([]string{"k"}, []limiter.Limit{l}, 0)); err != nil {
		t.Fatal(err)
	}
	if v, _ := limiter.Peek(ctx, m, "k", l); !v.Allowed {
		t.Fatal("the counter is still full after the gRPC Reset")
	}
	_, err := s.Reset(ctx, &pb.ResetRequest{Keys: [][]byte{[]byte("k"), nil}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "keys[1]") {
		t.Fatalf("an empty key: %v; want INVALID_ARGUMENT naming keys[1]", err)
	}
	kbk, _ := limiter.NewKeyByKey(func(context.Context, limiter.Entry) (limiter.Verdict, error) { return limiter.Verdict{}, nil }, limiter.KeyByKeyConfig{})
	u, _ := newResetServer(t, storeNode{kbk})
	_, err = u.Reset(ctx, rpc.ResetToPB([]string{"k"}, nil, 0))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a store that cannot reset: %v; want UNIMPLEMENTED", err)
	}
	if back := rpc.FromStatus(err); !errorsIsUnsupported(back) {
		t.Fatalf("UNIMPLEMENTED came back as %v, not matching limiter.ErrUnsupported", back)
	}
}

func errorsIsUnsupported(err error) bool { return errors.Is(err, limiter.ErrUnsupported) }
