package peer

import (
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ReceiptsToPB converts receipts (ages already) for the wire.
func ReceiptsToPB(rs []owner.Receipt) []*pb.Receipt {
	out := make([]*pb.Receipt, len(rs))
	for i, r := range rs {
		out[i] = &pb.Receipt{
			Key: []byte(r.Key), Limit: rpc.LimitToPB(r.Limit), Cost: r.Cost, Id: r.ID,
			AgeUs: r.AgeUs, StartAgeUs: r.StartAgeUs, AfterAheadUs: r.AfterAheadUs,
			Node: r.Node, AtUs: r.AtUs, MoveInc: r.MoveInc, MovedUs: r.Moved,
		}
	}
	return out
}

// ReceiptsFromPB converts receipts from the wire.
func ReceiptsFromPB(rs []*pb.Receipt) []owner.Receipt {
	if len(rs) == 0 {
		return nil
	}
	out := make([]owner.Receipt, len(rs))
	for i, r := range rs {
		out[i] = owner.Receipt{
			Key: string(r.GetKey()), Limit: rpc.LimitFromPB(r.GetLimit()), Cost: r.GetCost(), ID: r.GetId(),
			AgeUs: r.GetAgeUs(), StartAgeUs: r.GetStartAgeUs(), AfterAheadUs: r.GetAfterAheadUs(),
			Node: r.GetNode(), AtUs: r.GetAtUs(), MoveInc: r.GetMoveInc(), Moved: r.GetMovedUs(),
		}
	}
	return out
}

// ResultToPB converts one call's result for the wire.
func ResultToPB(r owner.Result) *pb.CallResult {
	if r.Err != nil {
		return &pb.CallResult{Error: rpc.ErrorToPB(r.Err)}
	}
	out := &pb.CallResult{Verdict: rpc.VerdictToPB(r.Verdict)}
	if len(r.Receipts) > 0 {
		out.Receipts = ReceiptsToPB(r.Receipts)
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
