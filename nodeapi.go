package ringlimit

import (
	"net/http"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/member"
	"github.com/ringlimit/ringlimit/rpc/api"
)

// FallbackHeader is the gRPC response header that Consume and Peek carry
// when the node's failure policy decided the verdict (api.FallbackHeader).
const FallbackHeader = api.FallbackHeader

// JSONVerdict is a verdict as the JSON API and the CLI write it.
type JSONVerdict = api.JSONVerdict

// VerdictJSON converts a verdict for the JSON API.
func VerdictJSON(v limiter.Verdict) JSONVerdict { return api.VerdictJSON(v) }

// apiNode is the node as its client API (package rpc/api) asks it.
type apiNode struct{ *Node }

func (a apiNode) Local(entries []limiter.Entry) bool { return a.router.Local(entries) }

func (a apiNode) RingVersion() uint64 { return a.members.Ring().Version() }

func (a apiNode) Owner(key string) (member.Member, error) {
	name, err := a.Node.Owner(key)
	if err != nil {
		return member.Member{}, err
	}
	if c := a.members.Cluster(); c != nil {
		if m, ok := c.Member(name); ok {
			return m, nil
		}
	}
	return member.Member{Name: name}, nil
}

// invalidated passes keys whose uses were given back to the clients'
// streams (owner.Config.Invalidated).
func (n *Node) invalidated(keys []string) { n.api.Invalidate(keys) }

// httpHandler is the node's HTTP port: the JSON API, health and readiness,
// and the metrics.
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	n.api.Mount(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-n.closing:
			api.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		case <-n.ready:
			api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		default:
			api.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "joining"})
		}
	})
	n.mountMetrics(mux)
	return httpAuth(n.cfg.Security, mux)
}
