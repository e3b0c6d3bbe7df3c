package ringlimit

import (
	"context"

	"github.com/ringlimit/ringlimit/internal/leasehold"
)

// Lease serves a holder's lease traffic (api.Leaser; see owner.Router.Lease).
func (a apiNode) Lease(ctx context.Context, holder string, rets []leasehold.Return, rels []leasehold.Release, asks []leasehold.Ask) []leasehold.Grant {
	return a.router.Lease(ctx, holder, rets, rels, asks)
}
