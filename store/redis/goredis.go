package redis

import (
	"context"
	"net"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// GoRedis returns a Config whose Eval and EvalSHA run the script with a
// go-redis client (a *goredis.Client, a *goredis.ClusterClient or any
// other UniversalClient); Cluster is set for a *goredis.ClusterClient. Set
// the other fields (Secret, Prefix...) on the result and pass it to New.
// The store does not own the client.
func GoRedis(client goredis.UniversalClient) Config {
	_, cluster := client.(*goredis.ClusterClient)
	return Config{
		Eval: func(ctx context.Context, script string, keys []string, args []any) (any, error) {
			return client.Eval(ctx, script, keys, args...).Result()
		},
		EvalSHA: func(ctx context.Context, sha1 string, keys []string, args []any) (any, error) {
			return client.EvalSha(ctx, sha1, keys, args...).Result()
		},
		Cluster: cluster,
	}
}

// ParseURL parses a redis://, rediss:// or unix:// URL into go-redis
// options fit for a rate limiter: no retries (a retried script could count
// twice), and dial, read, write and pool timeouts of cfg.Timeout (default
// 1 s), so while Redis is down every call fails within the timeout instead
// of waiting. A plaintext redis:// URL to a host that is not loopback logs
// a warning on cfg.Logger, or is refused with a *ConfigError (field "URL")
// when cfg.RequireTLS is set; rediss:// and unix sockets pass.
func ParseURL(rawURL string, cfg Config) (*goredis.Options, error) {
	c, err := urlConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkURL(rawURL, c); err != nil {
		return nil, err
	}
	opt, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, &ConfigError{Field: "URL", Reason: err.Error()}
	}
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // a refused dial fails the call now, not after 5 backed-off tries
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = c.Timeout, c.Timeout, c.Timeout, c.Timeout
	opt.ContextTimeoutEnabled = true
	return opt, nil
}

// Open connects to the Redis at rawURL (see ParseURL) and returns a store
// that owns the client: Close closes it. With cfg.Cluster the URL names
// cluster seeds, go-redis's way: redis://host1:port?addr=host2:port&addr=...
// cfg.Eval and cfg.EvalSHA are filled in by Open.
func Open(rawURL string, cfg Config) (*Store, error) {
	var client goredis.UniversalClient
	if cfg.Cluster {
		c, err := urlConfig(cfg)
		if err != nil {
			return nil, err
		}
		if err := checkURL(rawURL, c); err != nil {
			return nil, err
		}
		opt, err := goredis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, &ConfigError{Field: "URL", Reason: err.Error()}
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = c.Timeout, c.Timeout, c.Timeout, c.Timeout
		opt.ContextTimeoutEnabled = true
		opt.DialerRetries = 1
		client = goredis.NewClusterClient(opt)
	} else {
		opt, err := ParseURL(rawURL, cfg)
		if err != nil {
			return nil, err
		}
		client = goredis.NewClient(opt)
	}
	g := GoRedis(client)
	cfg.Eval, cfg.EvalSHA = g.Eval, g.EvalSHA
	s, err := New(cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.closeFn = client.Close
	return s, nil
}

// urlConfig fills the defaults ParseURL needs; Eval is not needed there.
func urlConfig(cfg Config) (Config, error) {
	if cfg.Eval == nil {
		cfg.Eval = func(context.Context, string, []string, []any) (any, error) { return nil, nil }
	}
	return cfg.withDefaults()
}

// checkURL warns about (or, with RequireTLS, refuses) a plaintext URL to a
// host that is not loopback, including cluster seeds given as addr=.
func checkURL(rawURL string, c Config) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return &ConfigError{Field: "URL", Reason: err.Error()}
	}
	switch u.Scheme {
	case "rediss", "unix":
		return nil
	case "redis":
	default:
		return &ConfigError{Field: "URL", Reason: "scheme " + u.Scheme + " is not redis, rediss or unix"}
	}
	hosts := []string{u.Hostname()}
	for _, a := range u.Query()["addr"] {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		if h == "" || loopback(h) {
			continue
		}
		if c.RequireTLS {
			return &ConfigError{Field: "URL", Reason: "redis:// to " + h +
				" sends keys and credentials unencrypted; use rediss:// (RequireTLS is set)"}
		}
		c.Logger.Warn("store/redis: plaintext redis:// to a host that is not loopback sends keys and credentials unencrypted; use rediss://",
			"host", h)
	}
	return nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
