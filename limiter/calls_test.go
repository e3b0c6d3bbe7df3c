package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// DecideCalls on a store that is not a CallsStore answers each call as
// ConsumeMany or PeekMany would, each all or nothing on its own.
func TestDecideCallsEachOnItsOwn(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	lim := limiter.Limit{Uses: 1, Window: time.Minute}
	ctx := context.Background()
	if _, err := m.ConsumeMany(ctx, []limiter.Entry{{Key: "spent", Limit: lim}}); err != nil {
		t.Fatal(err)
	}
	calls := []limiter.Call{
		{Entries: []limiter.Entry{{Key: "a", Limit: lim}}},
		{Entries: []limiter.Entry{{Key: "b", Limit: lim}, {Key: "spent", Limit: lim}}}, // refused whole
		{Entries: []limiter.Entry{{Key: "c", Limit: lim}}, Peek: true},
		{Entries: []limiter.Entry{{Key: "d", Limit: lim}}, Release: true},
		{Entries: []limiter.Entry{{Key: "", Limit: lim}}}, // bad input: its own error
	}
	out := make([]limiter.CallResult, len(calls))
	limiter.DecideCalls(ctx, m, calls, out)
	for i, want := range []bool{true, false, true, true} {
		if out[i].Err != nil || out[i].Verdict.Allowed != want {
			t.Errorf("call %d: %+v %v; want allowed %v", i, out[i].Verdict, out[i].Err, want)
		}
	}
	if out[4].Err == nil {
		t.Errorf("call with an empty key: %+v; want its input error", out[4].Verdict)
	}
	// b was not counted by the refused batch, c by the peek; d's release
	// gives its use back.
	for _, k := range []string{"b", "c"} {
		if v, _ := m.PeekMany(ctx, []limiter.Entry{{Key: k, Limit: lim}}); !v.Allowed {
			t.Errorf("%s was counted", k)
		}
	}
	if out[3].Verdict.Release == nil {
		t.Fatal("call 3 asked for a Release and got none")
	}
	if err := out[3].Verdict.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.PeekMany(ctx, []limiter.Entry{{Key: "d", Limit: lim}}); !v.Allowed {
		t.Error("d's use was not given back by its Release")
	}
	if out[0].Verdict.Release != nil {
		t.Error("call 0 did not ask for a Release and got one")
	}
}
