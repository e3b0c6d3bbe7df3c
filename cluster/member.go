package cluster

import (
	"encoding/json"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/member"
)

// Member states (aliases of package member's, which a fleet client can
// import without memberlist).
const (
	StateAlive   = member.StateAlive
	StateSuspect = member.StateSuspect // this node's probe failed; not yet declared dead
	StateDead    = member.StateDead    // declared dead by the failure detector
	StateLeft    = member.StateLeft    // left gracefully
)

// Member is one node as this node knows it. It is member.Member, so that
// a fleet client's members (package client) are the same type as a
// node's.
type Member = member.Member

// inRing reports whether a member in this state owns keys (see
// member.Member.InRing).
func inRing(state string) bool { return Member{State: state}.InRing() }

// record is a Member plus when its state last changed.
type record struct {
	Member
	since time.Time
}

// meta is the gossip metadata of a node. Fields are short because
// memberlist allows 512 bytes in all; M is the format version.
type meta struct {
	M    int    `json:"m"`
	GRPC string `json:"g,omitempty"`
	Ver  string `json:"v,omitempty"`
	// Leaving is set by Leave just before memberlist's leave message:
	// memberlist's NotifyLeave does not say whether a node left or died
	// (the Node it passes carries no state), so the leaver says it first.
	Leaving bool `json:"l,omitempty"`
}

const metaFormat = 1

func encodeMeta(grpcAddr, version string, leaving bool) []byte {
	b, _ := json.Marshal(meta{M: metaFormat, GRPC: grpcAddr, Ver: version, Leaving: leaving})
	return b
}

// decodeMeta returns the zero meta for metadata it cannot read (another
// format, or a node that is not ringlimit): the member still gossips and
// owns keys, it just has no gRPC address.
func decodeMeta(b []byte) meta {
	var m meta
	if json.Unmarshal(b, &m) != nil {
		return meta{}
	}
	return m
}

// memberFromNode describes n in state, or StateLeft if n announced that it
// is leaving. (n.State is not usable: memberlist keeps the state outside the
// Node it passes to delegates.)
func memberFromNode(n *memberlist.Node, state string) Member {
	md := decodeMeta(n.Meta)
	if md.Leaving {
		state = StateLeft
	}
	return Member{
		Name:       n.Name,
		GossipAddr: n.Address(),
		GRPCAddr:   md.GRPC,
		Version:    md.Ver,
		State:      state,
	}
}

// defaultVersion is the ringlimit module version this binary was built with.
func defaultVersion() string {
	const mod = "github.com/ringlimit/ringlimit"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := ""
	if bi.Main.Path == mod {
		v = bi.Main.Version
	} else if i := slices.IndexFunc(bi.Deps, func(d *debug.Module) bool { return d.Path == mod }); i >= 0 {
		v = bi.Deps[i].Version
	}
	if v == "" || v == "(devel)" {
		return "dev"
	}
	return v
}

// suspectName extracts the node name from memberlist's log line for a failed
// probe. memberlist has no event for suspicion, so its log is the only place
// this node learns that its own probe failed.
func suspectName(msg string) (string, bool) {
	const pre, post = "Suspect ", " has failed, no acks received"
	if !strings.HasPrefix(msg, pre) || !strings.HasSuffix(msg, post) {
		return "", false
	}
	return msg[len(pre) : len(msg)-len(post)], true
}
