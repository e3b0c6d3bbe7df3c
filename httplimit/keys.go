package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// maxClientKey is the longest client key used as it is; longer ones are
// replaced by their SHA-256.
const maxClientKey = 128

// AppendAddrKey appends the key of a client address: an IPv4 address
// (IPv4-mapped IPv6 included) as it is, an IPv6 address masked to
// ipv6Prefix bits and written as network/prefix ("2001:db8:1:2::/64").
// A zone is dropped. ipv6Prefix outside 1..128 means 128.
func AppendAddrKey(b []byte, a netip.Addr, ipv6Prefix int) []byte {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.AppendTo(b)
	}
	if ipv6Prefix < 1 || ipv6Prefix > 128 {
		ipv6Prefix = 128
	}
	p, err := a.Prefix(ipv6Prefix)
	if err != nil {
		return a.AppendTo(b)
	}
	return p.AppendTo(b)
}

// AddrKey is AppendAddrKey returning a string.
func AddrKey(a netip.Addr, ipv6Prefix int) string {
	var buf [64]byte
	return string(AppendAddrKey(buf[:0], a, ipv6Prefix))
}

// PeerAddr parses a peer address, "ip:port", "[ipv6]:port" or a bare
// address, as net/http puts it in Request.RemoteAddr.
func PeerAddr(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.Trim(remote, "[]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// ClientAddr returns the client address of r: its peer (RemoteAddr), or,
// when the peer is one of trusted, the right-most address of header
// ("X-Forwarded-For" or "Forwarded") that is not trusted. When every hop
// is trusted it is the left-most; an unreadable hop ("unknown", an
// obfuscated name) ends the walk at the trusted hop that named it. ok is
// false when RemoteAddr is not an address (a Unix socket).
func ClientAddr(r *http.Request, trusted []netip.Prefix, header string) (netip.Addr, bool) {
	peer, ok := PeerAddr(r.RemoteAddr)
	if !ok || len(trusted) == 0 || !isTrusted(peer, trusted) {
		return peer, ok
	}
	forwarded := header == "Forwarded"
	client := peer
	vals := r.Header[header]
	for i := len(vals) - 1; i >= 0; i-- {
		rest := vals[i]
		for rest != "" {
			var hop string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, ""
			}
			var a netip.Addr
			var ok bool
			if forwarded {
				a, ok = forwardedFor(hop)
			} else {
				a, ok = parseHop(hop)
			}
			if !ok {
				return client, true
			}
			client = a
			if !isTrusted(a, trusted) {
				return a, true
			}
		}
	}
	return client, true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads one X-Forwarded-For hop: an address, with or without a
// port ("203.0.113.9:4711", "[2001:db8::1]:4711").
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor reads the for= parameter of one Forwarded element
// (RFC 7239): for=192.0.2.60;proto=http or for="[2001:db8:cafe::17]:4711".
func forwardedFor(elem string) (netip.Addr, bool) {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(name, "for") {
			continue
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		return parseHop(value)
	}
	return netip.Addr{}, false
}

// HeaderKey returns a KeyFunc reading a request header, such as an API
// key: "X-API-Key". A request without it has no key.
func HeaderKey(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// ContextKey returns a KeyFunc reading a value an earlier middleware put
// in the request's context (the authenticated user): a string, or a
// fmt.Stringer. Placed after the authentication middleware, the limit is
// per user. A request without the value has no key.
func ContextKey(key any) KeyFunc {
	return func(r *http.Request) string { return contextString(r.Context(), key) }
}

func contextString(ctx context.Context, key any) string {
	switch v := ctx.Value(key).(type) {
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	}
	return ""
}

// appendClient appends a client key, hashing one longer than maxClientKey.
func appendClient(b []byte, k string) []byte {
	if len(k) <= maxClientKey {
		return append(b, k...)
	}
	sum := sha256.Sum256([]byte(k))
	b = append(b, "sha256:"...)
	return hex.AppendEncode(b, sum[:])
}
