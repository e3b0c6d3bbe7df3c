package ringlimit

import "github.com/ringlimit/ringlimit/rpc"

// notReadyError is ErrNotReady. It matches rpc.ErrUnavailable, so a call
// made before the node joined gets gRPC Unavailable (which clients retry)
// and HTTP 503, not Internal.
type notReadyError struct{}

func (notReadyError) Error() string { return "ringlimit: node has not joined its cluster yet" }

func (notReadyError) Is(target error) bool { return target == rpc.ErrUnavailable }
