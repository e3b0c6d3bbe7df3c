// Package rls serves Envoy's rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over any
// limiter.Store. Over a ringlimit node the whole fleet shares the counts,
// so Envoy, Istio and Gloo can use a ringlimit fleet where they used
// envoy's reference ratelimit service, with the same YAML rules.
//
//	cfg, err := rls.Load("/etc/ringlimit/ratelimit") // a directory or files
//	svc, err := rls.New(store, cfg)
//	svc.Register(grpcServer)
//
// A ringlimit node serves it on its gRPC port when ringlimit.Config.Envoy
// is set.
//
// # Configuration
//
// The files are in the format of envoy's reference service (one domain per
// file): domain, descriptors with key, value, rate_limit (unit,
// requests_per_unit, unlimited, name, replaces), shadow_mode and nested
// descriptors. detailed_metric is accepted and ignored (it shapes envoy's
// own statistics). Unknown keys, bad units, negative counts, duplicate
// rules and duplicate domains are a *ConfigError naming the file, the line
// and the field ("rl.yaml:12: descriptors[1].rate_limit.unit: ...").
//
// # Matching
//
// As in envoy's reference service, a request descriptor's entries are
// walked level by level through the nested rules. At each level an exact
// key and value beats a value ending in "*" (a prefix), which beats a rule
// with the key alone (which matches any value, each value counted on its
// own). The limit applies only when the walk ends on the descriptor's last
// entry at a rule that has one: a descriptor longer or shorter than the
// rules gets no limit and is answered OK. An unknown domain answers OK.
// A descriptor that carries its own limit (Envoy's limit override) uses it
// instead of the rules.
//
// # Counting
//
// Each descriptor with a limit is one entry: the key is KeyPrefix +
// domain + "/" + key=value pairs (escaped), the limit is requests_per_unit
// uses per unit (second, minute, hour, day; week, month = 30 days and
// year = 365 days as well), and the cost is the request's hits_addend (0
// means 1) or the descriptor's own hits_addend (0 there means look
// without counting).
//
// The window is a sliding window by default (Config.Algorithm), not
// envoy's fixed window: a client cannot get twice the limit through
// around a window's edge, and a refusal's duration_until_reset is the
// wait until a call would pass. A refused call costs nothing, where envoy's
// fixed window counts it too.
//
// Descriptors are counted independently, as in envoy: a request over the
// limit in one descriptor is still counted in the others. The overall code
// is OVER_LIMIT when any descriptor is. requests_per_unit 0 refuses every
// request without counting; so does a cost above the limit. unlimited
// answers OK with limit_remaining 4294967295. shadow_mode counts as usual
// and answers OK. A limit named in the replaces list of another limit
// matched by the same request is not counted (its status is OK with no
// limit). is_negative_hits (giving uses back) is not supported: such a
// descriptor is answered without counting.
//
// A store error fails the whole call with its gRPC code (Unavailable,
// or ResourceExhausted for a key past the store's bound); Envoy's
// failure_mode_deny decides what the proxy does then.
package rls
