package httplimit_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

var perMinute = limiter.Limit{Uses: 100, Window: time.Minute}

func TestOptionsValidated(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	with := func(f func(*httplimit.Options)) httplimit.Options {
		o := httplimit.Options{Limit: perMinute}
		f(&o)
		return o
	}
	for _, c := range []struct {
		name  string
		store limiter.Store
		opts  httplimit.Options
		field string
	}{
		{"nil store", nil, with(func(o *httplimit.Options) {}), "store"},
		{"no limit", m, httplimit.Options{}, "Limit.uses"},
		{"zero uses", m, with(func(o *httplimit.Options) { o.Limit.Uses = 0 }), "Limit.uses"},
		{"negative uses", m, with(func(o *httplimit.Options) { o.Limit.Uses = -5 }), "Limit.uses"},
		{"zero window", m, with(func(o *httplimit.Options) { o.Limit.Window = 0 }), "Limit.window"},
		{"fractional window", m, with(func(o *httplimit.Options) { o.Limit.Window = 1500 * time.Microsecond }), "Limit.window"},
		{"unknown algorithm", m, with(func(o *httplimit.Options) { o.Limit.Algorithm = 9 }), "Limit.algorithm"},
		{"sliding log past its bound", m, with(func(o *httplimit.Options) { o.Limit.Uses = 200_000 }), "Limit.uses"},
		{"IPv6 prefix 0", m, with(func(o *httplimit.Options) { o.IPv6Prefix = -1 }), "IPv6Prefix"},
		{"IPv6 prefix 129", m, with(func(o *httplimit.Options) { o.IPv6Prefix = 129 }), "IPv6Prefix"},
		{"local store policy", m, with(func(o *httplimit.Options) { o.OnStoreError = fallback.Local }), "OnStoreError"},
		{"unknown store policy", m, with(func(o *httplimit.Options) { o.OnStoreError = 9 }), "OnStoreError"},
		{"unknown missing-key policy", m, with(func(o *httplimit.Options) { o.OnMissingKey = 9 }), "OnMissingKey"},
		{"unknown headers", m, with(func(o *httplimit.Options) { o.Headers = 64 }), "Headers"},
		{"unknown proxy header", m, with(func(o *httplimit.Options) { o.ProxyHeader = "X-Real-IP" }), "ProxyHeader"},
		{"invalid proxy prefix", m, with(func(o *httplimit.Options) { o.TrustedProxies = []netip.Prefix{{}} }), "TrustedProxies[0]"},
		{"name not ASCII", m, with(func(o *httplimit.Options) { o.Name = "défaut" }), "Name"},
		{"route without pattern", m, with(func(o *httplimit.Options) { o.Routes = []httplimit.Rule{{Limit: perMinute}} }), "Routes[0].Pattern"},
		{"route with a bad pattern", m, with(func(o *httplimit.Options) { o.Routes = []httplimit.Rule{httplimit.Route("GET /{bad", perMinute)} }), "Routes[0].Pattern"},
		{"conflicting routes", m, with(func(o *httplimit.Options) {
			o.Routes = []httplimit.Rule{httplimit.Route("GET /a/{x}", perMinute), httplimit.Route("GET /{y}/b", perMinute)}
		}), "Routes[1].Pattern"},
		{"duplicate routes", m, with(func(o *httplimit.Options) {
			o.Routes = []httplimit.Rule{httplimit.Exempt("GET /healthz"), httplimit.Exempt("GET /healthz")}
		}), "Routes[1].Pattern"},
		{"route without limit", m, with(func(o *httplimit.Options) { o.Routes = []httplimit.Rule{{Pattern: "POST /login"}} }), "Routes[0].Limit.uses"},
		{"route with a bad window", m, with(func(o *httplimit.Options) {
			o.Routes = []httplimit.Rule{httplimit.Route("POST /login", limiter.Limit{Uses: 5, Window: -time.Second})}
		}), "Routes[0].Limit.window"},
	} {
		_, err := httplimit.New(c.store, c.opts)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("%s: New = %v; want an InputError on %s", c.name, err, c.field)
		}
	}
	if _, err := httplimit.New(m, httplimit.Options{Limit: perMinute, Routes: []httplimit.Rule{httplimit.Exempt("GET /healthz")}}); err != nil {
		t.Errorf("valid options: %v", err)
	}
	for _, s := range []string{"deny", "allow", "shared"} {
		if v, err := httplimit.ParseMissingKey(s); err != nil || v.String() != s {
			t.Errorf("ParseMissingKey(%q) = %v, %v", s, v, err)
		}
	}
	if _, err := httplimit.ParseMissingKey("ignore"); err == nil {
		t.Error("ParseMissingKey(ignore) = nil error")
	}
}

func TestWrapValidated(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	l, err := httplimit.NewLimiter(m, httplimit.Options{Limit: perMinute})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rule  httplimit.Rule
		field string
	}{
		{httplimit.Rule{}, "Rule.Limit.uses"},
		{httplimit.Rule{Exempt: true}, "Rule.Exempt"},
		{httplimit.Rule{Limit: limiter.Limit{Uses: 1, Window: time.Nanosecond}}, "Rule.Limit.window"},
	} {
		_, err := l.Wrap(c.rule, ok)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("Wrap(%+v) = %v; want an InputError on %s", c.rule, err, c.field)
		}
	}
}
