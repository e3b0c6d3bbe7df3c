package rpc

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// A replicated sliding log sends a LogUse message per recorded call: on a
// busy owner that is most of what replication costs, a message to build
// and, on the receiver, one to allocate and unmarshal per use. PackedLogs
// carries a whole batch's uses in three packed columns instead (see the
// proto), so a batch costs a few allocations whatever its uses. Only a
// receiver that said StateResponse.packs_logs is sent them: an older node
// would ignore the columns and read every log as empty.

// PackStates converts exported counter states for a StateRequest, their
// logs packed: the states carry no LogUse messages, packed holds the uses.
// A state with a use ahead of the sender's clock (a negative age; packed
// ages never are) keeps its log in the state and counts 0 in packed.
func PackStates(cs []limiter.CounterState) (states []*pb.CounterState, packed *pb.PackedLogs) {
	return new(Packer).Pack(cs)
}

// A Packer is PackStates with buffers kept from one request to the next:
// a loaded owner ships every few milliseconds to each successor, and the
// messages, columns and keys of one shipment serve the next. What Pack
// returns is valid until the Packer's next Pack; a Packer is for one
// goroutine at a time.
type Packer struct {
	states []*pb.CounterState
	msgs   []pb.CounterState
	packed pb.PackedLogs
}

// Pack converts cs as PackStates does, into p's buffers.
func (p *Packer) Pack(cs []limiter.CounterState) (states []*pb.CounterState, packed *pb.PackedLogs) {
	uses := 0
	for i := range cs {
		uses += len(cs[i].Log)
	}
	p.states = slices.Grow(p.states[:0], len(cs))[:len(cs)]
	p.msgs = slices.Grow(p.msgs[:0], len(cs))[:len(cs)]
	packed = &p.packed
	packed.Counts = slices.Grow(packed.Counts[:0], len(cs))[:len(cs)]
	clear(packed.Counts)
	packed.AgesUs = slices.Grow(packed.AgesUs[:0], uses)
	packed.Costs = slices.Grow(packed.Costs[:0], uses)
	packed.Ids = slices.Grow(packed.Ids[:0], uses)
	for i := range cs {
		c := &cs[i]
		s := &p.msgs[i]
		key := s.Key[:0] // the last request's, reused
		*s = pb.CounterState{Key: key}
		stateToPB(c, s)
		p.states[i] = s
		if len(c.Log) == 0 {
			continue
		}
		if !pastOnly(c.Log) {
			s.Log = make([]*pb.LogUse, len(c.Log))
			for j, u := range c.Log {
				s.Log[j] = &pb.LogUse{AgeUs: -u.At, Cost: u.Cost, Id: u.ID}
			}
			continue
		}
		packed.Counts[i] = uint32(len(c.Log))
		for _, u := range c.Log {
			packed.AgesUs = append(packed.AgesUs, -u.At)
			packed.Costs = append(packed.Costs, u.Cost)
			packed.Ids = append(packed.Ids, u.ID)
		}
	}
	return p.states, packed
}

// Size is how many states p's buffers hold (a pool drops a Packer grown
// past a usual shipment).
func (p *Packer) Size() int { return cap(p.msgs) }

// pastOnly reports whether every use lies at or before the export (its
// time, relative to it, is not positive).
func pastOnly(us []limiter.LogUse) bool {
	for _, u := range us {
		if u.At > 0 {
			return false
		}
	}
	return true
}

// CheckPacked checks the shape of a StateRequest's packed logs: as many
// counts as states, columns as long as the counts add up to, no state with
// both a count and a log of its own, no negative age and no cost below 1.
// It returns a *limiter.InputError naming the field (nil: no packed logs,
// or well formed); what the uses say is limiter.CheckState's to judge.
func CheckPacked(req *pb.StateRequest) error {
	p := req.GetPackedLogs()
	if p == nil {
		return nil
	}
	states := req.GetStates()
	if len(p.GetCounts()) != len(states) {
		return packedErr("packed_logs.counts", "%d counts for %d states", len(p.GetCounts()), len(states))
	}
	var total uint64
	for i, n := range p.GetCounts() {
		if n > 0 && len(states[i].GetLog()) > 0 {
			return packedErr("states["+strconv.Itoa(i)+"].log", "%d uses of its own and %d packed: one or the other", len(states[i].GetLog()), n)
		}
		total += uint64(n)
	}
	for _, col := range []struct {
		name string
		n    int
	}{{"packed_logs.ages_us", len(p.GetAgesUs())}, {"packed_logs.costs", len(p.GetCosts())}, {"packed_logs.ids", len(p.GetIds())}} {
		if uint64(col.n) != total {
			return packedErr(col.name, "%d values, but the counts add up to %d", col.n, total)
		}
	}
	for j, a := range p.GetAgesUs() {
		if a < 0 {
			return packedErr("packed_logs.ages_us["+strconv.Itoa(j)+"]", "must not be negative, got %d", a)
		}
	}
	for j, c := range p.GetCosts() {
		if c < 1 {
			return packedErr("packed_logs.costs["+strconv.Itoa(j)+"]", "must be at least 1, got %d", c)
		}
	}
	return nil
}

func packedErr(field, format string, args ...any) error {
	return &limiter.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// StatesFromRequest converts a StateRequest's states, packed logs or not
// (times stay relative), after CheckPacked. A state whose window no
// Duration holds is skipped, its packed uses with it (as StatesFromPB
// skips it).
func StatesFromRequest(req *pb.StateRequest) ([]limiter.CounterState, error) {
	p := req.GetPackedLogs()
	if p == nil {
		return StatesFromPB(req.GetStates()), nil
	}
	if err := CheckPacked(req); err != nil {
		return nil, err
	}
	ss := req.GetStates()
	uses := len(p.GetAgesUs())
	for _, s := range ss {
		uses += len(s.GetLog())
	}
	out := make([]limiter.CounterState, 0, len(ss))
	logs := make([]limiter.LogUse, uses) // one array, cut per state
	ages, costs, ids := p.GetAgesUs(), p.GetCosts(), p.GetIds()
	off := 0 // the next state's first use in the columns
	for i, s := range ss {
		n := int(p.GetCounts()[i])
		first := off
		off += n
		if !windowOK(s) {
			continue
		}
		out = append(out, limiter.CounterState{})
		c := &out[len(out)-1]
		stateFromPB(s, c)
		if n == 0 {
			c.Log, logs = logFromPB(s.GetLog(), logs)
			continue
		}
		c.Log, logs = logs[:n:n], logs[n:]
		for j := range c.Log {
			k := first + j
			c.Log[j] = limiter.LogUse{At: -ages[k], Cost: costs[k], ID: ids[k]}
		}
	}
	return out, nil
}
