package rpc

import (
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ResetToPB builds a ResetRequest (hops 0 from a client).
func ResetToPB(keys []string, limits []limiter.Limit, hops uint32) *pb.ResetRequest {
	req := &pb.ResetRequest{Keys: make([][]byte, len(keys)), Limits: make([]*pb.Limit, len(limits)), Hops: hops}
	for i, k := range keys {
		req.Keys[i] = []byte(k)
	}
	for i, l := range limits {
		req.Limits[i] = LimitToPB(l)
	}
	return req
}

// ResetFromPB reads a ResetRequest's keys and limits (limits that do not
// convert are refused later by the reset's checks, naming the field).
func ResetFromPB(req *pb.ResetRequest) ([]string, []limiter.Limit) {
	keys := make([]string, len(req.GetKeys()))
	for i, k := range req.GetKeys() {
		keys[i] = string(k)
	}
	limits := make([]limiter.Limit, len(req.GetLimits()))
	for i, l := range req.GetLimits() {
		limits[i] = LimitFromPB(l)
	}
	return keys, limits
}
