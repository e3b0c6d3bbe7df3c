package ringlimit

import "github.com/ringlimit/ringlimit/rpc"

// notReadyError is ErrNotReady. It matches rpc.ErrUnavailable, so where it
// travels as an error (WaitReady's, or a policy's Failure written by the
// JSON API) it is gRPC Unavailable and HTTP 503, not Internal.
type notReadyError struct{}

func (notReadyError) Error() string { return "ringlimit: node has not joined its cluster yet" }

func (notReadyError) Is(target error) bool { return target == rpc.ErrUnavailable }
