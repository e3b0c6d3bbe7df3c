package owner

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Bounds on the state peers send (HandOff, Replicate, Fetch answers).
//
// A node keeps --max-keys for every counter it holds, its own keys and
// the replicas it holds for other owners alike (they share one
// limiter.KeyBudget), and --max-log-uses for every sliding log. States a
// peer sends are checked first (limiter.CheckState); a request holding a
// malformed or oversized state is refused whole with InvalidArgument or
// ResourceExhausted naming the field ("states[3].log"), and nothing of it
// is stored. Then:
//
//   - HandOff: the states that fit are merged; the rest are refused with
//     ResourceExhausted naming "keys". The sender keeps every state of
//     the request (its hand-off failed) and retries each RebalanceInterval,
//     so no count is lost. Meanwhile a call for such a key here first
//     takes its state from the sender (the first-use fetch, within
//     FetchWindow of the ring change; stored past the bound, see Fetch
//     below), or is refused as any new key at the bound (this node holds
//     no state for it). Only a call between this node getting room and
//     the sender's next retry (RebalanceInterval) can be counted from
//     nothing. A node that leaves while its keys' new owner is full loses
//     the refused counts, as a crash would (their replicas remain).
//   - Replicate: the states that fit are stored; the rest are named
//     missing, so the owner sends them whole once there is room. A refused
//     replica weakens only the crash bound (an owner's crash loses its
//     count); it is counted (Stats.ReplicasRefused,
//     ringlimit_replicas_refused_total) and logged, at most once per 10 s.
//   - Fetch answers (asked by this node for keys it is to count) are
//     checked the same way, but stored even past the key bound: the peer
//     gave the counters up, and dropping them would lose their counts.

// checkStates validates a batch's states, naming the first bad one's
// field as "states[i]....". (The wire's own checks, such as a window that
// no Duration holds, are the peer server's.)
func checkStates(ss []limiter.CounterState, b limiter.Bounds) error {
	for i := range ss {
		if err := limiter.CheckState(&ss[i], b); err != nil {
			return prefixStates(i, err)
		}
	}
	return nil
}

func prefixStates(i int, err error) error {
	var ie *limiter.InputError
	if errors.As(err, &ie) {
		c := *ie
		c.Field = "states[" + strconv.Itoa(i) + "]." + c.Field
		return &c
	}
	return err
}

// validStates drops the states that fail limiter.CheckState (a Fetch
// answer: the asker's call goes on without them).
func (r *Router) validStates(states []limiter.CounterState, from string) []limiter.CounterState {
	out := states[:0]
	for i := range states {
		if err := limiter.CheckState(&states[i], r.bounds); err != nil {
			r.boundLogs.badState.note(r, "ringlimit: dropped a bad state from a peer", "peer", from, "err", err)
			continue
		}
		out = append(out, states[i])
	}
	return r.unreset(out, "")
}

// ServeHandOff merges a peer's hand-off within the bounds (see above).
func (r *Router) ServeHandOff(b StateBatch) (StateAck, error) {
	if err := checkStates(b.States, r.bounds); err != nil {
		return StateAck{}, err
	}
	states := r.unreset(b.States, b.From)
	refused := r.engine.ImportWithin(states)
	r.stats.Received.Add(int64(len(states) - len(refused)))
	r.stats.HandOffRefused.Add(int64(len(refused)))
	accepted := states
	if len(refused) > 0 {
		accepted = without(states, refused)
	}
	for _, c := range accepted {
		// The node that held the key for us has given it up: count it here.
		r.custody.TakeBack(c.Key, b.From)
		r.custody.Received(c.Key, b.From)
	}
	if len(accepted) > 0 {
		r.repl.mark(r.ring(), statesAsEntries(accepted), true)
	}
	if len(refused) > 0 {
		kb := r.engine.Budget()
		err := &limiter.InputError{Field: "keys", Bound: true, Reason: fmt.Sprintf(
			"%d of %d handed-off states refused: this node holds %d keys (replicas included), the bound is %d; keep them and retry", len(refused), len(states), kb.Len(), kb.Max())}
		r.boundLogs.handOff.note(r, "ringlimit: refused handed-off state at the key bound; the sender keeps it", "peer", b.From, "refused", len(refused))
		return StateAck{}, err
	}
	return StateAck{}, nil
}

// ServeReplicate stores an owner's replicated states within the bounds
// (see above), replacing what was held: the owner is the authority,
// releases included.
func (r *Router) ServeReplicate(b StateBatch) (StateAck, error) {
	if err := checkStates(b.States, r.bounds); err != nil {
		return StateAck{}, err
	}
	states := b.States
	resp := StateAck{MergesDeltas: true}
	missing, refused := r.replicas.PutWithin(states)
	seen := make(map[int]bool, len(missing))
	for _, i := range append(missing, refused...) {
		if seen[i] {
			continue
		}
		seen[i] = true
		c := &states[i]
		resp.Missing = append(resp.Missing, CounterID{c.Key, c.Algorithm, c.Window})
	}
	if len(refused) > 0 {
		r.stats.ReplicasRefused.Add(int64(len(refused)))
		r.boundLogs.replicas.note(r, "ringlimit: refused replicas at the key bound; an owner's crash may lose their counts", "peer", b.From, "refused", len(refused))
	}
	return resp, nil
}

// without returns states but those whose index is in drop (ascending).
func without(states []limiter.CounterState, drop []int) []limiter.CounterState {
	out := make([]limiter.CounterState, 0, len(states)-len(drop))
	j := 0
	for i, c := range states {
		if j < len(drop) && drop[j] == i {
			j++
			continue
		}
		out = append(out, c)
	}
	return out
}

// Replicas returns the store of the replicas this node holds for other
// owners (for metrics and tests).
func (r *Router) Replicas() *limiter.Memory { return r.replicas }

// boundLogs are the router's throttled logs of refused peer state.
type boundLogs struct{ handOff, replicas, badState throttledLog }

// throttledLog logs the first of a kind of event at once, then at most
// one line every 10 s with the number not logged since.
type throttledLog struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *throttledLog) note(r *Router, msg string, args ...any) {
	l.mu.Lock()
	now := r.rt.Now()
	if !l.last.IsZero() && now.Sub(l.last) < 10*time.Second {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	if dropped > 0 {
		args = append(args, "not_logged", dropped)
	}
	r.log.Warn(msg, args...)
}
