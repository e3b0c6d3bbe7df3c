package redis

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// ErrUnavailable is matched by every error of a call Redis did not answer
// (down, timed out, refused the script, an unexpected reply): a store
// failure, which the fallback wrapper turns into its policy. The
// underlying error is wrapped too.
var ErrUnavailable = errors.New("store/redis: unavailable")

// Store is a limiter.Store over Redis. Safe for concurrent use.
type Store struct {
	cfg     Config
	keys    *keyer
	idBase  uint64
	seq     atomic.Uint64
	closed  atomic.Bool
	closeFn func() error
	// pin, when set (tests only), pins the script's clock to the µs it
	// returns instead of the server's TIME.
	pin func() int64
	// refSkew (tests only) moves the short form's reply reference, in ms,
	// away from the clock.
	refSkew int64
}

var _ limiter.Store = (*Store)(nil)

// New returns a store that runs its script through cfg.Eval (and
// cfg.EvalSHA). It does not own the client: Close only stops the store.
func New(cfg Config) (*Store, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.Hash == HashAuto && len(c.Secret) == 0 {
		c.Logger.Warn("store/redis: keys are hashed with plain SHA-256, which does not hide IP addresses " +
			"(every IPv4 address can be hashed in seconds); set Config.Secret to 32+ random bytes")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Store{cfg: c, keys: newKeyer(&c), idBase: binary.LittleEndian.Uint64(b[:])}, nil
}

// Close stops the store (later calls get limiter.ErrClosed) and, for a
// store made by Open, closes its client. Idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) || s.closeFn == nil {
		return nil
	}
	return s.closeFn()
}

// ConsumeMany checks and records a batch in one script (one per key on a
// Redis Cluster without HashTag).
func (s *Store) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.decide(ctx, entries, true)
}

// PeekMany answers what ConsumeMany would, recording nothing.
func (s *Store) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.decide(ctx, entries, false)
}

// item is one distinct counter of a batch.
type item struct {
	key   string
	limit limiter.Limit
	cost  int64
	local bool // cost > capacity after merging duplicates: refused here, never sent
	debit bool // a debit (limiter.Entry.Debit): recorded whatever the outcome
	ok    bool
	out   limiter.Outcome
	now   int64 // µs, the clock of the script that decided it
	// receipt
	id    string // sliding log member id
	start int64  // sliding window start (ms)
	after int64  // token bucket arrival time left (µs, rounded up); fixed window end (µs)
	// a token bucket's moves stamp (limiter.BucketMoves; 0, 0: none)
	moveInc uint64
	moved   int64 // µs
}

// maxExact bounds the products the script computes in doubles (see doc.go).
const (
	maxExact = 1 << 52
	maxUses  = 1 << 42
)

// checkExact refuses a window or bucket limit whose arithmetic could pass
// 2^52 in the script's doubles: its uses, a bucket's burst, a debit's
// cost.
func checkExact(entries []limiter.Entry) error {
	for i := range entries {
		l := entries[i].Limit
		if l.Algorithm == limiter.TokenBucket {
			// The bucket's products are capacity * window and, for a
			// debit, cost * window.
			wms := int64(l.Window / time.Millisecond)
			field, n := "burst", l.Burst
			if c := entries[i].Cost; entries[i].Debit && c > n {
				field, n = "cost", c
			}
			if n > maxUses || n > maxExact/wms {
				f := "entries[" + strconv.Itoa(i) + "]."
				if field == "burst" {
					f += "limit."
				}
				return &limiter.InputError{
					Field: f + field,
					Reason: fmt.Sprintf("%s %d per %d ms: store/redis keeps token-bucket arithmetic exact in Lua's doubles only "+
						"while it is <= 2^42 and times the window (ms) <= 2^52", field, n, wms),
				}
			}
		}
		if logKept(l.Algorithm) {
			continue
		}
		if l.Algorithm == limiter.FixedWindow {
			// Only counts and whole-ms instants: no products.
			if l.Uses > maxExact {
				return &limiter.InputError{
					Field:  "entries[" + strconv.Itoa(i) + "].limit.uses",
					Reason: fmt.Sprintf("%d uses: store/redis keeps fixed-window counts exact in Lua's doubles only while uses <= 2^52", l.Uses),
				}
			}
			continue
		}
		wms := int64(l.Window / time.Millisecond)
		if l.Uses > maxUses || l.Uses > maxExact/wms {
			return &limiter.InputError{
				Field: "entries[" + strconv.Itoa(i) + "].limit.uses",
				Reason: fmt.Sprintf("%d uses per %d ms: store/redis keeps %v arithmetic exact in Lua's doubles only "+
					"while uses <= 2^42 and uses * window (ms) <= 2^52", l.Uses, wms, l.Algorithm),
			}
		}
	}
	return nil
}

func (s *Store) decide(ctx context.Context, entries []limiter.Entry, record bool) (limiter.Verdict, error) {
	if s.closed.Load() {
		return limiter.Verdict{}, limiter.ErrClosed
	}
	if err := s.cfg.Bounds.Check(entries); err != nil {
		return limiter.Verdict{}, err
	}
	if err := checkExact(entries); err != nil {
		return limiter.Verdict{}, err
	}
	if err := ctx.Err(); err != nil {
		return limiter.Verdict{}, err
	}
	if len(entries) == 1 && !entries[0].Debit && shortForm(&entries[0].Limit, max(entries[0].Cost, 1)) {
		return s.decideLog(ctx, &entries[0], record)
	}
	items, local := s.items(entries)
	op := opPeek
	switch {
	case entries[0].Debit && record:
		op = opDebit
	case entries[0].Debit:
		op = opPeekDebit
	case record && !local:
		op = opConsume
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	var err error
	if s.cfg.Cluster && s.cfg.HashTag == "" {
		err = s.runEach(cctx, items, op)
	} else {
		err = s.runBatch(cctx, items, op)
	}
	if err != nil {
		return limiter.Verdict{}, err
	}
	v := verdict(items)
	if v.Allowed && op == opConsume && limiter.WantsRelease(ctx) {
		v.Release = s.releaser(items)
	}
	return v, nil
}

// decideLog decides the common call, one sliding-log entry of cost 1, by
// the script's short form; it allocates only the key, the member id and
// what the call's arguments need.
func (s *Store) decideLog(ctx context.Context, e *limiter.Entry, record bool) (limiter.Verdict, error) {
	items := [1]item{{key: s.keys.key(e), limit: e.Limit, cost: 1}}
	op := opPeek
	if record {
		op = opConsume
		items[0].id = s.newID()
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.runLog(cctx, &items[0], op); err != nil {
		return limiter.Verdict{}, err
	}
	v := verdict(items[:])
	if v.Allowed && record && limiter.WantsRelease(ctx) {
		v.Release = s.releaser([]item{items[0]})
	}
	return v, nil
}

// bound gives a call Config.Timeout, unless ctx already ends sooner
// (then ctx bounds it as it is, with no timer of its own).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.cfg.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// newID returns a fresh sliding-log member id.
func (s *Store) newID() string {
	return strconv.FormatUint(splitmix(s.idBase+s.seq.Add(1)), 36)
}

// items builds the batch's counters; the same counter twice takes both
// costs under the tighter limit, as limiter.Memory does. local reports an
// item whose summed cost passes its uses.
func (s *Store) items(entries []limiter.Entry) (items []item, local bool) {
	items = make([]item, 0, len(entries))
	var id string
	for i := range entries {
		e := &entries[i]
		k := s.keys.key(e)
		cost := max(e.Cost, 1)
		dup := false
		for j := range items {
			if items[j].key == k {
				items[j].cost += cost
				items[j].limit = limiter.Tighter(items[j].limit, e.Limit)
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		it := item{key: k, limit: e.Limit, cost: cost, debit: e.Debit}
		if logKept(e.Limit.Algorithm) {
			if id == "" {
				id = s.newID()
			}
			it.id = id
		}
		items = append(items, it)
	}
	for i := range items {
		if items[i].cost > items[i].limit.Capacity() && !items[i].debit {
			items[i].local = true
			local = true
		}
	}
	return items, local
}

// verdict folds the items' outcomes into the batch's verdict (Release is
// the caller's to set).
func verdict(items []item) limiter.Verdict {
	v := limiter.Verdict{Allowed: true, Remaining: math.MaxInt64}
	retry, reset, now := int64(math.MinInt64), int64(math.MinInt64), int64(math.MinInt64)
	for i := range items {
		it := &items[i]
		v.Allowed = v.Allowed && it.ok
		v.Remaining = min(v.Remaining, it.out.Remaining)
		if !it.ok {
			retry = max(retry, satAdd(it.now, it.out.Wait))
		}
		reset = max(reset, it.out.Reset)
		now = max(now, it.now)
	}
	if v.Allowed {
		v.ResetAt = time.UnixMicro(reset)
		return v
	}
	at := ceilMilli(retry)
	v.RetryAt = time.UnixMicro(at)
	v.RetryAfter = limiter.MicrosDuration(at - now)
	return v
}

func (s *Store) releaser(items []item) func(context.Context) error {
	var done atomic.Bool
	return func(ctx context.Context) error {
		if done.Swap(true) {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		return s.release(ctx, items)
	}
}

// release gives back the items' recorded uses, as far as they are still
// counted, exactly as limiter.Memory.ReleaseReceipts does.
func (s *Store) release(ctx context.Context, items []item) error {
	if s.cfg.Cluster && s.cfg.HashTag == "" {
		var errs []error
		for i := range items {
			if err := s.releaseBatch(ctx, items[i:i+1]); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return s.releaseBatch(ctx, items)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ceilMilli rounds a µs instant up to whole milliseconds.
func ceilMilli(us int64) int64 {
	if us > math.MaxInt64-1000 {
		return us
	}
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return ms * 1000
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
