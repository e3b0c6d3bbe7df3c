package member

// Member states.
const (
	StateAlive   = "alive"
	StateSuspect = "suspect" // a node's probe failed; not yet declared dead
	StateDead    = "dead"    // declared dead by the failure detector
	StateLeft    = "left"    // left gracefully
)

// Member is one node as a node knows it (a client reads it from a node).
type Member struct {
	Name       string // unique node name; the name on the ring
	GossipAddr string // host:port it gossips on (its advertised address)
	GRPCAddr   string // from its metadata; "" if it has none
	Version    string // software version from its metadata
	State      string // StateAlive, StateSuspect, StateDead or StateLeft
}

// InRing reports whether a member in this state owns keys: alive or
// suspect. Suspect members stay on the ring: a suspicion is often
// refuted, and moving keys back and forth costs more than waiting for the
// verdict.
func (m Member) InRing() bool { return m.State == StateAlive || m.State == StateSuspect }
