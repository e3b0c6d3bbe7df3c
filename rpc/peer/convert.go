package peer

import (
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ReceiptsToPB converts receipts (ages already) for the wire.
func ReceiptsToPB(rs []owner.Receipt) []*pb.Receipt { return receiptsToPB(rs, nil, "", false) }

// receiptsToPB is ReceiptsToPB for the answer to a call of entries by
// node self; lean: the asker completes receipts (ForwardRequest's
// lean_receipts), so a receipt leaves out its key and limit when the
// receipts are the entries' own, one each in order, and its node when
// self recorded it. A spread call's receipts, or an entry's key given
// twice (one receipt per counter), go whole.
func receiptsToPB(rs []owner.Receipt, entries []limiter.Entry, self string, lean bool) []*pb.Receipt {
	aligned := leanAligned(rs, entries, lean)
	ws := make([]pb.Receipt, len(rs)) // one allocation for the messages
	out := make([]*pb.Receipt, len(rs))
	for i := range rs {
		receiptToPB(&rs[i], &ws[i], self, lean, aligned)
		out[i] = &ws[i]
	}
	return out
}

// leanAligned reports whether lean receipts may leave out their keys and
// limits: they are the entries' own, one each in order.
func leanAligned(rs []owner.Receipt, entries []limiter.Entry, lean bool) bool {
	aligned := lean && len(rs) == len(entries)
	for i := 0; aligned && i < len(rs); i++ {
		aligned = rs[i].Key == entries[i].Key && rs[i].Limit == entries[i].Limit
	}
	return aligned
}

// receiptToPB writes r into the zero message w (see receiptsToPB).
func receiptToPB(r *owner.Receipt, w *pb.Receipt, self string, lean, aligned bool) {
	if !aligned {
		w.Key, w.Limit = []byte(r.Key), rpc.LimitToPB(r.Limit)
	}
	if !lean || r.Node != self {
		w.Node = r.Node
	}
	w.Cost, w.Id, w.AgeUs, w.StartAgeUs, w.AfterAheadUs = r.Cost, r.ID, r.AgeUs, r.StartAgeUs, r.AfterAheadUs
	w.AtUs, w.MoveInc, w.MovedUs = r.AtUs, r.MoveInc, r.Moved
}

// ReceiptsFromPB converts receipts from the wire.
func ReceiptsFromPB(rs []*pb.Receipt) []owner.Receipt { return receiptsFromPB(rs, nil, "") }

// receiptsFromPB is ReceiptsFromPB for the answer node gave to a call of
// entries: it completes lean receipts (see receiptsToPB).
func receiptsFromPB(rs []*pb.Receipt, entries []limiter.Entry, node string) []owner.Receipt {
	if len(rs) == 0 {
		return nil
	}
	out := make([]owner.Receipt, len(rs))
	for i, r := range rs {
		out[i] = owner.Receipt{
			Cost: r.GetCost(), ID: r.GetId(),
			AgeUs: r.GetAgeUs(), StartAgeUs: r.GetStartAgeUs(), AfterAheadUs: r.GetAfterAheadUs(),
			Node: r.GetNode(), AtUs: r.GetAtUs(), MoveInc: r.GetMoveInc(), Moved: r.GetMovedUs(),
		}
		if r.GetLimit() == nil && i < len(entries) {
			out[i].Key, out[i].Limit = entries[i].Key, entries[i].Limit
		} else {
			out[i].Key, out[i].Limit = string(r.GetKey()), rpc.LimitFromPB(r.GetLimit())
		}
		if out[i].Node == "" {
			out[i].Node = node
		}
	}
	return out
}

// ResultToPB converts one call's result for the wire.
func ResultToPB(r owner.Result) *pb.CallResult { return resultToPB(r, nil, "", false) }

// resultToPB is ResultToPB for the answer to a call of entries by node
// self, its receipts lean when the asker completes them.
func resultToPB(r owner.Result, entries []limiter.Entry, self string, lean bool) *pb.CallResult {
	if r.Err != nil {
		return &pb.CallResult{Error: rpc.ErrorToPB(r.Err)}
	}
	if len(r.Receipts) == 1 {
		// The usual answer, one allowed use: its messages in one
		// allocation.
		m := &struct {
			cr pb.CallResult
			v  pb.Verdict
			w  pb.Receipt
			p  [1]*pb.Receipt
		}{}
		rpc.VerdictToPBInto(r.Verdict, &m.v)
		receiptToPB(&r.Receipts[0], &m.w, self, lean, leanAligned(r.Receipts, entries, lean))
		m.p[0] = &m.w
		m.cr.Verdict, m.cr.Receipts = &m.v, m.p[:]
		return &m.cr
	}
	out := &pb.CallResult{Verdict: rpc.VerdictToPB(r.Verdict)}
	if len(r.Receipts) > 0 {
		out.Receipts = receiptsToPB(r.Receipts, entries, self, lean)
	}
	return out
}

// CountersToPB converts counter names for the wire.
func CountersToPB(cs []owner.CounterID) []*pb.FetchRequest_Counter {
	out := make([]*pb.FetchRequest_Counter, len(cs))
	for i, c := range cs {
		out[i] = &pb.FetchRequest_Counter{Key: []byte(c.Key), Algorithm: pb.Algorithm(c.Algorithm), WindowMs: int64(c.Window / time.Millisecond)}
	}
	return out
}

// CountersFromPB converts counter names from the wire.
func CountersFromPB(cs []*pb.FetchRequest_Counter) []owner.CounterID {
	out := make([]owner.CounterID, len(cs))
	for i, c := range cs {
		out[i] = owner.CounterID{Key: string(c.GetKey()), Algorithm: limiter.Algorithm(c.GetAlgorithm()), Window: time.Duration(c.GetWindowMs()) * time.Millisecond}
	}
	return out
}
