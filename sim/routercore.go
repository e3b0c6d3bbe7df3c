package sim

import (
	"errors"
)

// NewRouterCore builds the real owner.Router on the simulated runtime,
// transport and membership.
func NewRouterCore(env Env) (Core, error) {
	return nil, errors.New("sim: owner.Router is not wired to owner.Runtime and owner.Peers yet")
}
