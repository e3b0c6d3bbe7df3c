package rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// LimitToPB converts a limit, without its Name: names do not travel
// between peers (see ClientEntriesToPB).
func LimitToPB(l limiter.Limit) *pb.Limit {
	return &pb.Limit{Algorithm: pb.Algorithm(l.Algorithm), Uses: l.Uses, WindowMs: int64(l.Window / time.Millisecond),
		Calendar: pb.Calendar(l.Calendar), Zone: l.ZoneName(), Burst: l.Burst}
}

// LimitFromPB converts a limit. Out-of-range values convert to limits that
// Validate refuses, naming the field; a window too large for a Duration
// saturates to one that is refused.
func LimitFromPB(l *pb.Limit) limiter.Limit {
	if l == nil {
		return limiter.Limit{}
	}
	w := time.Duration(l.WindowMs) * time.Millisecond
	if l.WindowMs > maxWindowMs || l.WindowMs < -maxWindowMs {
		w = -1 // no Duration holds it: CheckWindows reports the value sent
	}
	alg := limiter.Algorithm(255)
	if l.Algorithm >= 0 && l.Algorithm <= pb.Algorithm_CONCURRENCY {
		alg = limiter.Algorithm(l.Algorithm)
	}
	out := limiter.Limit{Algorithm: alg, Uses: l.Uses, Window: w, Name: l.Name, Burst: l.Burst}
	if l.Calendar != 0 || l.Zone != "" {
		out.Calendar = limiter.Calendar(255)
		if l.Calendar >= 0 && l.Calendar <= 3 {
			out.Calendar = limiter.Calendar(l.Calendar)
		}
		if l.Zone != "" {
			zone, err := limiter.LoadZone(l.Zone)
			if err != nil {
				zone = time.FixedZone(l.Zone, 0) // Validate refuses it, naming the zone
			}
			out.Zone = zone
		}
	}
	return out
}

// maxWindowMs is the largest window_ms: limiter.MaxWindow in ms.
const maxWindowMs = int64(limiter.MaxWindow / time.Millisecond)

// CheckWindows refuses a window_ms that no time.Duration holds, with an
// *limiter.InputError naming entries[i].limit.window and the value that
// was sent. LimitFromPB saturates such a window to one that Validate
// refuses, so without this check the caller would read "got -1ns" about
// the 9223372036855 it sent. Windows a Duration holds are left to
// Validate, which names them as exactly.
func CheckWindows(es []*pb.Entry) error {
	for i, e := range es {
		if w := e.GetLimit().GetWindowMs(); w > maxWindowMs || w < -maxWindowMs {
			return &limiter.InputError{
				Field:  fmt.Sprintf("entries[%d].limit.window", i),
				Reason: fmt.Sprintf("must be from 1ms to %dms, got %dms", maxWindowMs, w),
			}
		}
	}
	return nil
}

// EntriesToPB converts a batch for a peer. The messages share one
// allocation. Limit names are left out: they label metrics at the node a
// client called, which has them, so forwards and receipts do not carry
// them.
func EntriesToPB(es []limiter.Entry) []*pb.Entry {
	out := make([]*pb.Entry, len(es))
	msgs := make([]struct {
		e pb.Entry
		l pb.Limit
	}, len(es))
	for i := range es {
		m := &msgs[i]
		entryToPB(&es[i], &m.e, &m.l)
		out[i] = &m.e
	}
	return out
}

// CallToPB is a pb.Call of the entries (EntriesToPB), its messages in one
// allocation for a call of one entry, the usual one.
func CallToPB(es []limiter.Entry) *pb.Call {
	if len(es) != 1 {
		return &pb.Call{Entries: EntriesToPB(es)}
	}
	m := &struct {
		c pb.Call
		p [1]*pb.Entry
		e pb.Entry
		l pb.Limit
	}{}
	entryToPB(&es[0], &m.e, &m.l)
	m.p[0] = &m.e
	m.c.Entries = m.p[:]
	return &m.c
}

// entryToPB writes e into the zero messages m and l (its limit).
func entryToPB(e *limiter.Entry, m *pb.Entry, l *pb.Limit) {
	l.Algorithm, l.Uses, l.WindowMs, l.Burst = pb.Algorithm(e.Limit.Algorithm), e.Limit.Uses, int64(e.Limit.Window/time.Millisecond), e.Limit.Burst
	if e.Limit.Calendar != limiter.NoCalendar || e.Limit.Zone != nil {
		l.Calendar, l.Zone = pb.Calendar(e.Limit.Calendar), e.Limit.ZoneName()
	}
	m.Key, m.Limit, m.Cost, m.Debit = []byte(e.Key), l, e.Cost, e.Debit
}

// ClientEntriesToPB converts a batch for a node's client API: as
// EntriesToPB, with the limits' names, which the called node's metrics
// use.
func ClientEntriesToPB(es []limiter.Entry) []*pb.Entry {
	out := EntriesToPB(es)
	setNames(out, es)
	return out
}

// ClientCallToPB is CallToPB for a node's client API, with the limits'
// names (ClientEntriesToPB).
func ClientCallToPB(es []limiter.Entry) *pb.Call {
	c := CallToPB(es)
	setNames(c.Entries, es)
	return c
}

func setNames(out []*pb.Entry, es []limiter.Entry) {
	for i := range es {
		if n := es[i].Limit.Name; n != "" {
			out[i].Limit.Name = n
		}
	}
}

// EntriesFromPB converts a batch.
func EntriesFromPB(es []*pb.Entry) []limiter.Entry {
	return EntriesFromPBInto(make([]limiter.Entry, len(es)), es)
}

// EntriesFromPBInto is EntriesFromPB into out (len(es) long), which it
// returns: a request's calls share one array.
func EntriesFromPBInto(out []limiter.Entry, es []*pb.Entry) []limiter.Entry {
	for i, e := range es {
		out[i] = limiter.Entry{Key: string(e.GetKey()), Limit: LimitFromPB(e.GetLimit()), Cost: e.GetCost(), Debit: e.GetDebit()}
	}
	return out
}

// VerdictToPB converts a verdict (Release and Failure do not travel).
func VerdictToPB(v limiter.Verdict) *pb.Verdict {
	out := &pb.Verdict{}
	VerdictToPBInto(v, out)
	return out
}

// VerdictToPBInto is VerdictToPB into a zero out: a response's verdicts
// share one array.
func VerdictToPBInto(v limiter.Verdict, out *pb.Verdict) {
	out.Allowed, out.Remaining, out.RetryAfterUs, out.Shadowed = v.Allowed, v.Remaining, int64(v.RetryAfter/time.Microsecond), v.Shadowed
	if !v.RetryAt.IsZero() {
		out.RetryAtMs = v.RetryAt.UnixMilli()
	}
	if !v.ResetAt.IsZero() {
		out.ResetAtMs = v.ResetAt.UnixMilli()
	}
}

// VerdictFromPB converts a verdict.
func VerdictFromPB(v *pb.Verdict) limiter.Verdict {
	out := limiter.Verdict{Allowed: v.GetAllowed(), Remaining: v.GetRemaining(), RetryAfter: limiter.MicrosDuration(v.GetRetryAfterUs()), Shadowed: v.GetShadowed()}
	if v.GetRetryAtMs() != 0 {
		out.RetryAt = time.UnixMilli(v.GetRetryAtMs())
	}
	if v.GetResetAtMs() != 0 {
		out.ResetAt = time.UnixMilli(v.GetResetAtMs())
	}
	return out
}

// ReceiptsToPB converts receipts recorded by node on a clock reading now
// (µs) to ages.
func ReceiptsToPB(rs []limiter.Receipt, node string, now int64) []*pb.Receipt {
	out := make([]*pb.Receipt, len(rs))
	for i, r := range rs {
		out[i] = &pb.Receipt{
			Key: []byte(r.Key), Limit: LimitToPB(r.Limit), Cost: r.Cost, Id: r.ID,
			AgeUs: now - r.At, StartAgeUs: now - r.Start, AfterAheadUs: r.After - now,
			Node: node, AtUs: now, MoveInc: r.MoveInc, MovedUs: r.Moved,
		}
	}
	return out
}

// ReceiptsFromPB converts receipts to the clock of node self reading now
// (µs). Receipts self recorded come back exactly, by its own clock;
// others by their ages plus elapsed µs (the time since they were received,
// so the transit time is the only error).
func ReceiptsFromPB(rs []*pb.Receipt, self string, now, elapsed int64) []limiter.Receipt {
	out := make([]limiter.Receipt, len(rs))
	for i, r := range rs {
		base := now - elapsed
		if r.GetNode() == self && r.GetAtUs() != 0 {
			base = r.GetAtUs()
		}
		out[i] = limiter.Receipt{
			Key: string(r.GetKey()), Limit: LimitFromPB(r.GetLimit()), Cost: r.GetCost(), ID: r.GetId(),
			At: base - r.GetAgeUs(), Start: base - r.GetStartAgeUs(), After: base + r.GetAfterAheadUs(),
			MoveInc: r.GetMoveInc(), Moved: r.GetMovedUs(),
		}
	}
	return out
}

// StatesToPB converts exported counter states (times already relative).
func StatesToPB(cs []limiter.CounterState) []*pb.CounterState {
	// Replication sends every changed counter: allocate the messages of a
	// batch in a few arrays, not one by one.
	uses := 0
	for i := range cs {
		uses += len(cs[i].Log)
	}
	out := make([]*pb.CounterState, len(cs))
	states := make([]pb.CounterState, len(cs))
	logMsgs := make([]pb.LogUse, uses)
	logPtrs := make([]*pb.LogUse, uses)
	for i := range cs {
		c := &cs[i]
		s := &states[i]
		stateToPB(c, s)
		n := len(c.Log)
		s.Log = logPtrs[:n:n]
		for j, u := range c.Log {
			m := &logMsgs[j]
			m.AgeUs, m.Cost, m.Id = -u.At, u.Cost, u.ID
			s.Log[j] = m
		}
		logMsgs, logPtrs = logMsgs[n:], logPtrs[n:]
		out[i] = s
	}
	return out
}

// stateToPB fills s with c's fields but its log.
func stateToPB(c *limiter.CounterState, s *pb.CounterState) {
	s.Key, s.Algorithm, s.WindowMs = append(s.Key[:0], c.Key...), pb.Algorithm(c.Algorithm), int64(c.Window/time.Millisecond)
	s.StartAgeUs, s.Curr, s.Prev = -c.Counts.Start, c.Counts.Curr, c.Counts.Prev
	s.TatAheadUs, s.Rem, s.Uses = c.Bucket.TAT, c.Bucket.Rem, c.Bucket.Uses
	if c.Algorithm == limiter.FixedWindow {
		s.TatAheadUs, s.Curr = c.Fixed.End, c.Fixed.Count
	}
	s.Delta = c.Delta
	if c.Algorithm == limiter.TokenBucket && c.Moves.Inc != 0 {
		s.MoveInc, s.MovedUs, s.MovesUntilAheadUs = c.Moves.Inc, c.Moves.Moved, c.Moves.Until
	}
	if len(c.Holds) > 0 {
		s.Holds = make([]*pb.BucketHold, len(c.Holds))
		for j, h := range c.Holds {
			s.Holds[j] = &pb.BucketHold{Id: h.ID, K: h.K, ExpiryAheadUs: h.Expiry}
		}
	}
}

// StatesFromPB converts counter states (times stay relative), adding
// elapsed µs to their ages.
func StatesFromPB(ss []*pb.CounterState) []limiter.CounterState {
	out := make([]limiter.CounterState, 0, len(ss))
	uses := 0
	for _, s := range ss {
		uses += len(s.GetLog())
	}
	logs := make([]limiter.LogUse, uses) // one array, cut per state
	for _, s := range ss {
		if !windowOK(s) {
			continue
		}
		out = append(out, limiter.CounterState{})
		c := &out[len(out)-1]
		stateFromPB(s, c)
		c.Log, logs = logFromPB(s.GetLog(), logs)
	}
	return out
}

// logFromPB converts a state's own log into the front of buf (which must
// hold it) and returns it and the rest of buf.
func logFromPB(us []*pb.LogUse, buf []limiter.LogUse) (log, rest []limiter.LogUse) {
	n := len(us)
	log = buf[:n:n]
	for j, u := range us {
		log[j] = limiter.LogUse{At: -u.GetAgeUs(), Cost: u.GetCost(), ID: u.GetId()}
	}
	return log, buf[n:]
}

// windowOK reports whether s's window is one a Duration holds (a state
// without one is skipped: the peer server refuses the whole batch first).
func windowOK(s *pb.CounterState) bool {
	return s.GetWindowMs() > 0 && s.GetWindowMs() <= int64(limiter.MaxWindow/time.Millisecond)
}

// stateFromPB fills c (zero) with s's fields but its log.
func stateFromPB(s *pb.CounterState, c *limiter.CounterState) {
	c.Key, c.Algorithm, c.Window = string(s.GetKey()), limiter.Algorithm(s.GetAlgorithm()), time.Duration(s.GetWindowMs())*time.Millisecond
	c.Delta = s.GetDelta()
	if c.Algorithm == limiter.FixedWindow {
		c.Fixed = limiter.FixedState{End: s.GetTatAheadUs(), Count: s.GetCurr()}
		return
	}
	c.Counts = limiter.WindowState{Start: -s.GetStartAgeUs(), Curr: s.GetCurr(), Prev: s.GetPrev()}
	c.Bucket = limiter.BucketState{TAT: s.GetTatAheadUs(), Rem: s.GetRem(), Uses: s.GetUses()}
	if c.Algorithm == limiter.TokenBucket {
		c.Moves = limiter.BucketMoves{Inc: s.GetMoveInc(), Moved: s.GetMovedUs(), Until: s.GetMovesUntilAheadUs()}
		for _, h := range s.GetHolds() {
			c.Holds = append(c.Holds, limiter.BucketHold{ID: h.GetId(), K: h.GetK(), Expiry: h.GetExpiryAheadUs()})
		}
	}
}

// Sentinel errors of the cluster, mapped to and from gRPC codes. They are
// owner's (callers match them without importing the wire); these names
// stay for callers that used them here.
var (
	// ErrUnavailable: no node could be reached in time.
	ErrUnavailable = owner.ErrUnavailable
	// ErrShuttingDown: the node is closing and takes no new calls.
	ErrShuttingDown = owner.ErrShuttingDown
)

// Reasons say what a code alone does not (pb.Error.reason, and the
// ErrorInfo detail of a status, in domain ErrorDomain).
const (
	ErrorDomain        = "ringlimit"
	ReasonShuttingDown = "SHUTTING_DOWN"
)

// reason names err's reason, if it has one.
func reason(err error) string {
	if errors.Is(err, ErrShuttingDown) {
		return ReasonShuttingDown
	}
	return ""
}

// ToStatus maps an error to a gRPC status: InvalidArgument for bad input
// (naming the field), ResourceExhausted past a bound, DeadlineExceeded,
// Canceled, Unavailable for reachability and shutdown (with reason
// SHUTTING_DOWN in an ErrorInfo detail).
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	st := status.New(Code(err), err.Error())
	if r := reason(err); r != "" {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: r, Domain: ErrorDomain}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// statusReason reads the reason of a status's ErrorInfo detail.
func statusReason(s *status.Status) string {
	for _, d := range s.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

// Code picks the gRPC code for an error.
func Code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, limiter.ErrBound):
		return codes.ResourceExhausted
	case errors.Is(err, limiter.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, ErrShuttingDown), errors.Is(err, limiter.ErrClosed), errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, limiter.ErrUnsupported):
		return codes.Unimplemented
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Internal
}

// ErrorToPB converts an error for a CallResult.
func ErrorToPB(err error) *pb.Error {
	if err == nil {
		return nil
	}
	e := &pb.Error{Code: uint32(Code(err)), Message: err.Error(), Reason: reason(err)}
	var ie *limiter.InputError
	if errors.As(err, &ie) {
		e.Field = ie.Field
		e.Message = ie.Reason
	}
	return e
}

// ErrorFromPB turns a CallResult error back into a Go error: input errors
// become *limiter.InputError again (so errors.As works across the wire),
// the rest wrap the matching sentinel.
func ErrorFromPB(e *pb.Error) error {
	if e == nil {
		return nil
	}
	switch codes.Code(e.Code) {
	case codes.InvalidArgument:
		return &limiter.InputError{Field: e.Field, Reason: e.Message}
	case codes.ResourceExhausted:
		return &limiter.InputError{Field: e.Field, Reason: e.Message, Bound: true}
	case codes.Unavailable:
		if e.GetReason() == ReasonShuttingDown {
			return fmt.Errorf("%w: %w", ErrUnavailable, ErrShuttingDown)
		}
		return fmt.Errorf("%w: %s", ErrUnavailable, e.Message)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, e.Message)
	}
	return status.Error(codes.Code(e.Code), e.Message)
}

// FromStatus turns an RPC error into a Go error matching limiter's and
// this package's sentinels.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch s.Code() {
	case codes.InvalidArgument, codes.ResourceExhausted:
		field, reason := splitField(s.Message())
		return &limiter.InputError{Field: field, Reason: reason, Bound: s.Code() == codes.ResourceExhausted}
	case codes.Unavailable:
		if statusReason(s) == ReasonShuttingDown {
			return fmt.Errorf("%w: %w", ErrUnavailable, ErrShuttingDown)
		}
		return fmt.Errorf("%w: %s", ErrUnavailable, s.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, s.Message())
	case codes.Canceled:
		return fmt.Errorf("%w: %s", context.Canceled, s.Message())
	case codes.Unimplemented:
		// A store that cannot (limiter.ErrUnsupported), or a node too old
		// to have the method.
		return fmt.Errorf("%w: %s", limiter.ErrUnsupported, s.Message())
	}
	return err
}

// splitField reads "limiter: entries[0].key: must not be empty".
func splitField(msg string) (field, reason string) {
	msg = strings.TrimPrefix(msg, "limiter: ")
	if i := strings.Index(msg, ": "); i > 0 {
		return msg[:i], msg[i+2:]
	}
	return "", msg
}

// CompleteReceipts fills in, from the call they answer, the key and limit
// a lean receipt leaves out (ForwardRequest.lean_receipts: a receipt
// without a limit is for the call's entry at its index).
func CompleteReceipts(rs []*pb.Receipt, call *pb.Call) {
	es := call.GetEntries()
	for i, r := range rs {
		if r.GetLimit() == nil && i < len(es) {
			r.Key, r.Limit = es[i].GetKey(), es[i].GetLimit()
		}
	}
}
