package redis

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

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

// ParseURL parses a redis://, rediss://, valkey://, valkeys:// or unix://
// URL into go-redis options fit for a rate limiter: no retries (a retried
// script could count twice), read, write and pool timeouts of cfg.Timeout
// (default 1 s) and a dial timeout of cfg.Timeout but at least 1 s, so
// while Redis is down every call fails within the timeout instead of
// waiting (a call's own deadline bounds its dial too). valkey:// and
// valkeys:// are read as redis:// and rediss://. An empty rawURL is read
// from the environment: REDIS_URL, else VALKEY_URL; with neither set it
// is a *ConfigError (field "URL"). A plaintext redis:// or valkey:// URL
// to a host that is not loopback logs a warning on cfg.Logger, or is
// refused with a *ConfigError (field "URL") when cfg.RequireTLS is set;
// rediss://, valkeys:// and unix sockets pass.
func ParseURL(rawURL string, cfg Config) (*goredis.Options, error) {
	c, err := urlConfig(cfg)
	if err != nil {
		return nil, err
	}
	if rawURL, err = resolveURL(rawURL); err != nil {
		return nil, err
	}
	if err := checkURL(rawURL, c); err != nil {
		return nil, err
	}
	opt, err := goredis.ParseURL(redisScheme(rawURL))
	if err != nil {
		return nil, &ConfigError{Field: "URL", Reason: redact(err.Error(), rawURL)}
	}
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // a refused dial fails the call now, not after 5 backed-off tries
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = dialTimeout(c.Timeout), c.Timeout, c.Timeout, c.Timeout
	opt.ContextTimeoutEnabled = true
	return opt, nil
}

// MinDialTimeout is the shortest dial timeout ParseURL and Open give a
// client, whatever Config.Timeout: a connection (TLS included) that takes
// longer than a short call timeout is still worth making once.
const MinDialTimeout = time.Second

func dialTimeout(timeout time.Duration) time.Duration { return max(timeout, MinDialTimeout) }

// urlEnv lists the environment variables ParseURL and Open read, in
// order, when they are given no URL.
var urlEnv = []string{"REDIS_URL", "VALKEY_URL"}

// resolveURL returns rawURL, or when it is empty the first of urlEnv set.
func resolveURL(rawURL string) (string, error) {
	if rawURL != "" {
		return rawURL, nil
	}
	for _, name := range urlEnv {
		if u := os.Getenv(name); u != "" {
			return u, nil
		}
	}
	return "", &ConfigError{Field: "URL", Reason: "no URL given, and neither REDIS_URL nor VALKEY_URL is set"}
}

// redisScheme rewrites valkey:// and valkeys:// (which go-redis does not
// know) to redis:// and rediss://; the rest of the URL is kept.
func redisScheme(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	switch strings.ToLower(scheme) {
	case "valkey":
		return "redis://" + rest
	case "valkeys":
		return "rediss://" + rest
	}
	return rawURL
}

// redact keeps a URL's password out of an error message.
func redact(msg, rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// Open connects to the Redis (or Valkey, KeyDB, Dragonfly...) at rawURL
// (see ParseURL; an empty rawURL reads REDIS_URL, else VALKEY_URL) and
// returns a store that owns the client: Close closes it. It connects
// before it returns, within the dial timeout (cfg.Timeout, at least 1 s),
// so a wrong address, port or password fails here, with an error
// matching ErrUnavailable, rather than at the first call. With
// cfg.Cluster the URL names cluster seeds, go-redis's way:
// redis://host1:port?addr=host2:port&addr=... cfg.Eval and cfg.EvalSHA
// are filled in by Open.
func Open(rawURL string, cfg Config) (*Store, error) {
	rawURL, err := resolveURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := urlConfig(cfg)
	if err != nil {
		return nil, err
	}
	var client goredis.UniversalClient
	if cfg.Cluster {
		if err := checkURL(rawURL, c); err != nil {
			return nil, err
		}
		opt, err := goredis.ParseClusterURL(redisScheme(rawURL))
		if err != nil {
			return nil, &ConfigError{Field: "URL", Reason: redact(err.Error(), rawURL)}
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = dialTimeout(c.Timeout), c.Timeout, c.Timeout, c.Timeout
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
	if err := connect(client, dialTimeout(c.Timeout)+c.Timeout); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("%w: connect to %s: %w", ErrUnavailable, hostOf(rawURL), err)
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

// connect makes the client's first connection and checks that the server
// answers. A user limited to the store's commands (see doc.go) may not
// run PING: its NOPERM answer still proves the connection and the login.
func connect(client goredis.UniversalClient, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	err := client.Ping(ctx).Err()
	if err != nil && goredis.HasErrorPrefix(err, "NOPERM") {
		return nil
	}
	return err
}

// hostOf is the host:port (or socket path) of a URL, for errors: never the
// password.
func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the URL"
	}
	if u.Host == "" {
		return u.Path
	}
	return u.Host
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
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "rediss", "valkeys", "unix":
		return nil
	case "redis", "valkey":
	default:
		return &ConfigError{Field: "URL", Reason: "scheme " + u.Scheme + " is not redis, rediss, valkey, valkeys or unix"}
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
			return &ConfigError{Field: "URL", Reason: scheme + ":// to " + h +
				" sends keys and credentials unencrypted; use " + scheme + "s:// (RequireTLS is set)"}
		}
		c.Logger.Warn("store/redis: plaintext "+scheme+":// to a host that is not loopback sends keys and credentials unencrypted; use "+scheme+"s://",
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
