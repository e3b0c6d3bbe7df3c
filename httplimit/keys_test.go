package httplimit_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

func TestAddrKey(t *testing.T) {
	for _, c := range []struct {
		addr   string
		prefix int
		want   string
	}{
		{"203.0.113.9", 64, "203.0.113.9"},
		{"::ffff:203.0.113.9", 64, "203.0.113.9"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 128, "2001:db8:1:2:aaaa:bbbb:cccc:dddd/128"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 1, "::/1"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"::1", 64, "::/64"},
	} {
		if got := httplimit.AddrKey(netip.MustParseAddr(c.addr), c.prefix); got != c.want {
			t.Errorf("AddrKey(%s, %d) = %q, want %q", c.addr, c.prefix, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"203.0.113.9:4711", "203.0.113.9"},
		{"[2001:db8::1]:4711", "2001:db8::1"},
		{"[::ffff:203.0.113.9]:80", "203.0.113.9"},
		{"2001:db8::1", "2001:db8::1"},
		{"@", ""},
		{"", ""},
	} {
		a, ok := httplimit.PeerAddr(c.in)
		if got := a.String(); (c.want == "" && ok) || (c.want != "" && got != c.want) {
			t.Errorf("PeerAddr(%q) = %s, %v; want %q", c.in, got, ok, c.want)
		}
	}
}

// Keys against a real server, whose peer is always 127.0.0.1.
func TestKeys(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	type user struct{}
	for _, c := range []struct {
		name   string
		opts   httplimit.Options
		header []string
		want   string
	}{
		{"peer address", httplimit.Options{}, nil, "127.0.0.1"},
		{"forwarding header from an untrusted peer is ignored",
			httplimit.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			[]string{"X-Forwarded-For", "198.51.100.7"}, "127.0.0.1"},
		{"forwarding header without trusted proxies is ignored",
			httplimit.Options{}, []string{"X-Forwarded-For", "198.51.100.7", "Forwarded", "for=198.51.100.8"}, "127.0.0.1"},
		{"trusted proxy", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"right-most untrusted hop: a spoofed left part is ignored", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.1.2.3"}, "198.51.100.7"},
		{"several header lines", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.7:5555, 10.1.2.3"}, "198.51.100.7"},
		{"every hop trusted: the left-most", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "10.9.9.9, 10.1.2.3"}, "10.9.9.9"},
		{"an unreadable hop stops at the proxy that named it", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "198.51.100.7, unknown, 10.1.2.3"}, "10.1.2.3"},
		{"IPv6 masked to /64", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "2001:db8:1:2:aaaa::5"}, "2001:db8:1:2::/64"},
		{"IPv6 in brackets with a port, /48", httplimit.Options{TrustedProxies: loopback, IPv6Prefix: 48},
			[]string{"X-Forwarded-For", "[2001:db8:1:2:aaaa::5]:443"}, "2001:db8:1::/48"},
		{"IPv4-mapped IPv6 keyed as IPv4", httplimit.Options{TrustedProxies: loopback},
			[]string{"X-Forwarded-For", "::ffff:198.51.100.7"}, "198.51.100.7"},
		{"Forwarded", httplimit.Options{TrustedProxies: loopback, ProxyHeader: "Forwarded"},
			[]string{"Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.1;by=10.0.0.2`}, "2001:db8:cafe::/64"},
		{"Forwarded configured: X-Forwarded-For is not read", httplimit.Options{TrustedProxies: loopback, ProxyHeader: "forwarded"},
			[]string{"X-Forwarded-For", "198.51.100.7"}, "127.0.0.1"},
		{"Forwarded with an obfuscated hop", httplimit.Options{TrustedProxies: loopback, ProxyHeader: "Forwarded"},
			[]string{"Forwarded", "for=_hidden, for=10.0.0.1"}, "10.0.0.1"},
		{"API key header", httplimit.Options{Key: httplimit.HeaderKey("x-api-key")},
			[]string{"X-API-Key", "k-123"}, "k-123"},
		{"long key hashed", httplimit.Options{Key: httplimit.HeaderKey("X-API-Key")},
			[]string{"X-API-Key", strings.Repeat("a", 200)}, "sha256:c2a908d98f5df987ade41b5fce213067efbcc21ef2240212a41e54b5e7c28ae5"},
		{"user from the context", httplimit.Options{Key: httplimit.ContextKey(user{})},
			[]string{"Authorization", "Bearer ada"}, "ada"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newKeyStore(t, nil)
			c.opts.Limit = perMinute
			c.opts.Logger = discard
			mw, err := httplimit.New(store, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			// A stand-in authentication middleware in front of the limiter.
			auth := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if u, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
						r = r.WithContext(context.WithValue(r.Context(), user{}, u))
					}
					next.ServeHTTP(w, r)
				})
			}
			srv := serve(t, auth(mw(ok)))
			r := do(t, srv, "GET", "/", c.header...)
			if got := store.lastKey(); r.status != 200 || got != "http:*:"+c.want {
				t.Errorf("status %d, key %q; want key %q", r.status, got, "http:*:"+c.want)
			}
		})
	}
}

// A missing key follows OnMissingKey, and the first one is logged.
func TestMissingKey(t *testing.T) {
	for _, c := range []struct {
		policy   httplimit.MissingKey
		statuses []int
		counted  bool
	}{
		{httplimit.MissingDeny, []int{403, 403, 403}, false},
		{httplimit.MissingAllow, []int{200, 200, 200}, false},
		{httplimit.MissingShared, []int{200, 200, 429}, true},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			store := newKeyStore(t, nil)
			logger, logs := newLogger()
			mw, err := httplimit.New(store, httplimit.Options{
				Limit:        limiter.Limit{Uses: 2, Window: time.Minute},
				Key:          httplimit.HeaderKey("X-API-Key"),
				OnMissingKey: c.policy,
				Logger:       logger,
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, mw(ok))
			for i, want := range c.statuses {
				r := do(t, srv, "GET", "/reports?x=1")
				if r.status != want {
					t.Errorf("call %d: %d, want %d", i, r.status, want)
				}
				if want == 403 {
					const body = `{"type":"about:blank","title":"Forbidden","status":403,"detail":"Request has no rate limit key","instance":"/reports"}`
					if r.body != body || r.header.Get("Content-Type") != "application/problem+json; charset=utf-8" {
						t.Errorf("403 body %s (%s)", r.body, r.header.Get("Content-Type"))
					}
				}
				if want == 200 && !c.counted && len(rlHeaders(r.header)) != 0 {
					t.Errorf("uncounted request has headers %v", rlHeaders(r.header))
				}
			}
			if keys := store.allKeys(); c.counted != (len(keys) == 3 && keys[0] == "http:*:\x00") {
				t.Errorf("keys %q", keys)
			}
			wantLine := `level=WARN msg="rate limit: request has no key" on_missing_key=` + c.policy.String() + ` method=GET path=/reports remote=127.0.0.1:`
			if l := logs.Lines(); len(l) != 1 || !strings.HasPrefix(l[0], wantLine) {
				t.Errorf("log %q; want one line starting %q", l, wantLine)
			}
		})
	}
}
