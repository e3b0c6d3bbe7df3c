package limiter_test

import (
	"context"
	"testing"
	"time"

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

// ConsumeReceipts hands back the receipts and no Release of its own: the
// caller gives the uses back with ReleaseReceipts (a node's router sends
// them over the wire, where a func cannot go).
func TestConsumeReceiptsHasNoRelease(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{})
	defer m.Close()
	ctx := limiter.WithRelease(context.Background())
	e := []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Minute}}}
	v, rs, err := m.ConsumeReceipts(ctx, e, true)
	if err != nil || !v.Allowed || len(rs) != 1 || v.Release != nil {
		t.Fatalf("ConsumeReceipts: %+v, %d receipts, %v; want allowed, one receipt, no Release", v, len(rs), err)
	}
	if err := m.ReleaseReceipts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if v, err := m.ConsumeMany(ctx, e); err != nil || !v.Allowed || v.Release == nil {
		t.Fatalf("ConsumeMany after the release: %+v, %v; want allowed with a Release", v, err)
	}
}
