package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

//go:embed script.lua
var script string

// scriptSHA is the script's SHA1, as EVALSHA wants it.
var scriptSHA = func() string {
	h := sha1.Sum([]byte(script))
	return hex.EncodeToString(h[:])
}()

// ErrNoScript may be wrapped by an EvalSHAFunc whose client does not
// report NOSCRIPT in its error text.
var ErrNoScript = errors.New("NOSCRIPT script not cached by the server")

const (
	opConsume = "c"
	opPeek    = "p"
	opRelease = "r"
	// debits (limiter.Entry.Debit): recorded whatever the budget says
	opDebit     = "d"
	opPeekDebit = "q"
	argsPer     = 10 // ARGV per key, at most (a release's)
	// the short form (one sliding-log entry of cost 1)
	opLogConsume = "L"
	opLogPeek    = "l"
)

// eval runs the script, by SHA1 first when it can, and appends the
// reply's integers to dst.
func (s *Store) eval(ctx context.Context, keys []string, args []any, dst []int64) ([]int64, error) {
	var res any
	var err error
	if s.cfg.EvalSHA != nil {
		res, err = s.cfg.EvalSHA(ctx, scriptSHA, keys, args)
		if err != nil && isNoScript(err) {
			res, err = s.cfg.Eval(ctx, script, keys, args)
		}
	} else {
		res, err = s.cfg.Eval(ctx, script, keys, args)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out, err := ints(res, dst)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return out, nil
}

func isNoScript(err error) bool {
	return errors.Is(err, ErrNoScript) || strings.Contains(err.Error(), "NOSCRIPT")
}

// ints appends the script's reply, an array of integers (or one
// integer, from the short form), to dst.
func ints(res any, dst []int64) ([]int64, error) {
	switch r := res.(type) {
	case []int64:
		return append(dst, r...), nil
	case []any:
		for i, x := range r {
			n, ok := integer(x)
			if !ok {
				return nil, fmt.Errorf("store/redis: reply element %d is %v (%T), not an integer", i, x, x)
			}
			dst = append(dst, n)
		}
		return dst, nil
	}
	n, ok := integer(res)
	if !ok {
		return nil, fmt.Errorf("store/redis: reply is %v (%T), want an integer or an array of integers", res, res)
	}
	return append(dst, n), nil
}

// integer reads one integer of a reply, as clients return them.
func integer(x any) (int64, bool) {
	switch v := x.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// head returns ARGV's first value: the op, with the pinned clock in tests.
func (s *Store) head(op string, n int) []any {
	args := make([]any, 1, 1+argsPer*n)
	args[0] = op
	if s.pin != nil {
		now := s.pin()
		ms := floorDiv(now, 1000)
		args[0] = op + " " + strconv.FormatInt(ms, 10) + " " + strconv.FormatInt(now-ms*1000, 10)
	}
	return args
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// shortForm reports whether an item goes by the script's short form.
func shortForm(l *limiter.Limit, cost int64) bool {
	return logKept(l.Algorithm) && cost == 1 && l.Uses >= 1
}

// logCall holds one short-form call's KEYS and ARGV: one allocation.
type logCall struct {
	keys [1]string
	args [5]any
}

// packBits is how far the short form's one-integer reply shifts the
// clock difference (see script.lua): the in-window uses take the bits
// below.
const packBits = 20

// runLog decides one sliding-log item of cost 1 by the script's short
// form (op opConsume or opPeek).
func (s *Store) runLog(ctx context.Context, it *item, op string) error {
	var o any = opLogPeek // constants: boxed without allocating
	if op == opConsume {
		o = opLogConsume
	}
	var ref int64 // the reply's reference, ms
	if s.pin != nil {
		o = s.head(o.(string), 0)[0]
		ref = floorDiv(s.pin(), 1000)
	} else {
		ref = time.Now().UnixMilli()
	}
	ref += s.refSkew
	call := &logCall{keys: [1]string{it.key}, args: [5]any{o, it.limit.Uses, wms(it.limit) + 1, it.id, ref}}
	var buf [4]int64
	res, err := s.eval(ctx, call.keys[:], call.args[:], buf[:0])
	if err != nil {
		return err
	}
	var a, b, c int64
	switch len(res) {
	case 1: // passed: (now - ref ms) << packBits | uses
		it.ok = true
		it.now = ref*1000 + res[0]>>packBits
		a = res[0] & (1<<packBits - 1)
	case 2: // passed: {now, uses}
		it.ok = true
		it.now, a = res[0], res[1]
	case 4: // refused: {now, uses, at, newest}
		it.ok = false
		it.now, a, b, c = res[0], res[1], res[2], res[3]
	default:
		return fmt.Errorf("%w: store/redis: short-form reply of %d values, want 1, 2 or 4", ErrUnavailable, len(res))
	}
	it.out = outcome(it, it.now, a, b, c, 0)
	return agree(it)
}

// agree fails a call whose script and package limiter decided apart.
func agree(it *item) error {
	if it.out.Allowed != it.ok {
		return fmt.Errorf("%w: store/redis: the script and package limiter disagree on %s (script %v, limiter %+v); please report",
			ErrUnavailable, it.limit, it.ok, it.out)
	}
	return nil
}

// runBatch decides every sent item in one script.
func (s *Store) runBatch(ctx context.Context, items []item, op string) error {
	if len(items) == 1 && !items[0].local && shortForm(&items[0].limit, items[0].cost) {
		return s.runLog(ctx, &items[0], op)
	}
	keys := make([]string, 0, len(items))
	args := s.head(op, len(items))
	for i := range items {
		it := &items[i]
		if it.local {
			continue
		}
		keys = append(keys, it.key)
		args = append(args, scriptAlg(it.limit.Algorithm), it.limit.Uses, wms(it.limit), it.cost, s.x1(it))
	}
	res, err := s.eval(ctx, keys, args, nil)
	if err != nil {
		return err
	}
	return s.read(res, items)
}

// runEach decides the items one script each, in order (a Redis Cluster
// without HashTag). After a refusal the rest are only peeked, for the
// verdict's longest wait, and the uses recorded before it are given back.
// A debit (opDebit) is never refused here: each key records it.
func (s *Store) runEach(ctx context.Context, items []item, op string) error {
	refused := false
	recorded := 0
	var failed error
	sent := 0
	for i := range items {
		it := &items[i]
		if it.local {
			continue
		}
		sent++
		o := op
		if refused {
			o = opPeek
		}
		var err error
		if shortForm(&it.limit, it.cost) {
			err = s.runLog(ctx, it, o)
		} else {
			var res []int64
			res, err = s.eval(ctx, []string{it.key}, append(s.head(o, 1),
				scriptAlg(it.limit.Algorithm), it.limit.Uses, wms(it.limit), it.cost, s.x1(it)), nil)
			if err == nil {
				err = s.read(res, items[i:i+1])
			}
		}
		if err != nil {
			failed = err
			break
		}
		if o == opConsume {
			if it.ok {
				recorded = i + 1
			} else {
				refused = true
			}
		}
	}
	if sent == 0 { // only local refusals: read the clock for the verdict
		res, err := s.eval(ctx, nil, s.head(opPeek, 0), nil)
		if err == nil {
			err = s.read(res, items)
		}
		failed = err
	}
	if (refused || failed != nil) && recorded > 0 {
		s.giveBack(ctx, items[:recorded])
	}
	return failed
}

// giveBack releases uses recorded before a refusal (or an error). A
// give-back that fails leaves its count behind: it is logged.
func (s *Store) giveBack(ctx context.Context, items []item) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	for i := range items {
		if items[i].local || !items[i].ok {
			continue
		}
		if err := s.releaseBatch(ctx, items[i:i+1]); err != nil {
			s.cfg.Logger.Error("store/redis: give-back after a refused batch failed; the use stays counted until it leaves its window",
				"key", items[i].key, "cost", items[i].cost, "err", err)
		}
	}
}

func (s *Store) releaseBatch(ctx context.Context, items []item) error {
	keys := make([]string, 0, len(items))
	args := s.head(opRelease, len(items))
	for i := range items {
		it := &items[i]
		if it.local || !it.ok {
			continue
		}
		keys = append(keys, it.key)
		switch it.limit.Algorithm {
		case limiter.SlidingLog, limiter.Concurrency:
			args = append(args, 0, it.limit.Uses, wms(it.limit), it.cost, it.id, "", "", "", "", "")
		case limiter.SlidingWindow:
			args = append(args, 1, it.limit.Uses, wms(it.limit), it.cost, it.start, "", "", "", "", "")
		case limiter.FixedWindow:
			args = append(args, 3, it.limit.Uses, wms(it.limit), it.cost, it.after/1000, "", "", "", "", "")
		default:
			// The receipt's moves stamp and the incarnation a record begun
			// by this release takes (see script.lua and limiter.BucketMoves).
			args = append(args, 2, it.limit.Uses, wms(it.limit), it.cost, it.after/1000, it.after%1000,
				strconv.FormatInt(int64(it.moveInc), 10), it.moved/1000, it.moved%1000, strconv.FormatInt(int64(newInc()), 10))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := s.eval(ctx, keys, args, nil)
	return err
}

func wms(l limiter.Limit) int64 { return int64(l.Window / time.Millisecond) }

// x1 is an item's fifth argument for a consume or peek: the sliding log's
// member id; for a calendar fixed window the boundaries the script picks
// its window from, "e0 e1 e2" in ms (limiter.CalendarEnds around the
// caller's clock: Lua has no zone rules, and the server's clock decides);
// a token bucket's burst, when it has one.
func (s *Store) x1(it *item) string {
	if it.limit.Algorithm == limiter.TokenBucket && it.limit.Burst > 0 {
		return strconv.FormatInt(it.limit.Burst, 10)
	}
	if it.limit.Algorithm != limiter.FixedWindow || it.limit.Calendar == limiter.NoCalendar {
		return it.id
	}
	ref := time.Now().UnixMicro()
	if s.pin != nil {
		ref = s.pin()
	}
	e0, e1, e2 := limiter.CalendarEnds(ref, it.limit)
	return strconv.FormatInt(e0/1000, 10) + " " + strconv.FormatInt(e1/1000, 10) + " " + strconv.FormatInt(e2/1000, 10)
}

// read turns a reply into the sent items' outcomes, with limiter's own
// arithmetic on the state the script read, and checks the script decided
// the same.
func (s *Store) read(res []int64, items []item) error {
	if len(res) < 3 {
		return fmt.Errorf("%w: store/redis: short reply (%d values)", ErrUnavailable, len(res))
	}
	now := res[1]*1000 + res[2]
	j := 3
	sent := make([]int, 0, len(items)) // the item of each KEYS index
	for i := range items {
		it := &items[i]
		it.now = now
		if it.local {
			it.ok = false
			it.out = limiter.Outcome{Wait: math.MaxInt64, Remaining: it.limit.Uses}
			continue
		}
		if j+5 > len(res) {
			return fmt.Errorf("%w: store/redis: short reply (%d values)", ErrUnavailable, len(res))
		}
		sent = append(sent, i)
		r := res[j : j+5]
		j += 5
		if it.debit {
			it.out = outcomeDebit(it, now, r[1], r[2], r[3], r[4])
			it.ok = it.out.Allowed
			continue
		}
		it.ok = r[0] == 1
		it.out = outcome(it, now, r[1], r[2], r[3], r[4])
		if err := agree(it); err != nil {
			return err
		}
	}
	// A consume's reply ends with the stamps of the buckets' live moves
	// records: {KEYS index from 1, incarnation, moved ms, moved µs}.
	for ; j+4 <= len(res); j += 4 {
		k := res[j] - 1
		if k < 0 || k >= int64(len(sent)) {
			return fmt.Errorf("%w: store/redis: a moves stamp names key %d of %d", ErrUnavailable, res[j], len(sent))
		}
		it := &items[sent[k]]
		it.moveInc, it.moved = uint64(res[j+1]), res[j+2]*1000+res[j+3]
	}
	if j != len(res) {
		return fmt.Errorf("%w: store/redis: %d values left over in the reply", ErrUnavailable, len(res)-j)
	}
	return nil
}

// newInc returns the incarnation a moves record begun by a release
// takes: random, never 0.
func newInc() uint64 {
	for {
		if x := rand.Uint64(); x != 0 {
			return x
		}
	}
}

// outcome computes what limiter's algorithms answer on the state the
// script read, and notes the receipt a release needs.
func outcome(it *item, now, a, b, c, d int64) limiter.Outcome {
	l, cost := it.limit, it.cost
	w := limiter.Micros(l.Window)
	switch l.Algorithm {
	case limiter.SlidingLog, limiter.Concurrency:
		// a: uses in the window; b: the use whose leaving frees the call;
		// c: the newest use.
		if a+cost <= l.Uses {
			return limiter.Outcome{Allowed: true, Remaining: l.Uses - a - cost, Reset: satAdd(now, w)}
		}
		return limiter.Outcome{Remaining: max(l.Uses-a, 0), Wait: satAdd(b, w) - now, Reset: satAdd(c, w)}
	case limiter.SlidingWindow:
		st := limiter.WindowState{Start: a * 1000, Curr: b, Prev: c}
		o := st.Decide(now, l, cost)
		it.start = a
		return o
	case limiter.FixedWindow:
		// a: the window's end (ms), after the script opened the window
		// holding now; b: its count.
		st := limiter.FixedState{End: a * 1000, Count: b}
		o := st.Decide(now, l, cost)
		it.after = st.End
		return o
	default:
		st := limiter.BucketState{TAT: a*1000 + b, Rem: c, Uses: d}
		o := st.Decide(now, l, cost)
		if o.Allowed {
			st.Record(now, l, cost)
			it.after = st.TAT
			if st.Rem > 0 {
				it.after++
			}
		}
		return o
	}
}

// outcomeDebit computes what limiter's DecideDebit answers on the state
// the script read before it recorded the debit.
func outcomeDebit(it *item, now, a, b, c, d int64) limiter.Outcome {
	l, cost := it.limit, it.cost
	w := limiter.Micros(l.Window)
	switch l.Algorithm {
	case limiter.SlidingLog, limiter.Concurrency:
		// a: uses in the window before the debit; b: the use whose leaving
		// lets one more in after it (0: the debit itself must leave).
		o := limiter.Outcome{Allowed: a <= l.Uses, Remaining: max(l.Uses-satAdd(a, cost), 0), Reset: satAdd(now, w)}
		if !o.Allowed {
			o.Wait = w
			if need := satAdd(a, cost) + 1 - l.Uses; need <= a {
				o.Wait = max(satAdd(b, w)-now, 1)
			}
		}
		return o
	case limiter.SlidingWindow:
		st := limiter.WindowState{Start: a * 1000, Curr: b, Prev: c}
		return st.DecideDebit(now, l, cost)
	case limiter.FixedWindow:
		st := limiter.FixedState{End: a * 1000, Count: b}
		return st.DecideDebit(now, l, cost)
	default:
		st := limiter.BucketState{TAT: a*1000 + b, Rem: c, Uses: d}
		return st.DecideDebit(now, l, cost)
	}
}

// logKept reports an algorithm the script keeps as a log of calls: a
// sliding log, and a concurrency limit, whose slots are a log's calls
// (each leaves at its TTL or when released by its member id) under a
// key of its own (algTags).
func logKept(a limiter.Algorithm) bool {
	return a == limiter.SlidingLog || a == limiter.Concurrency
}

// scriptAlg is the script's number for an algorithm: a concurrency
// limit runs the sliding log's arithmetic (0).
func scriptAlg(a limiter.Algorithm) int {
	if a == limiter.Concurrency {
		return 0
	}
	return int(a)
}
