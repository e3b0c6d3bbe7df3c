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
// requests_per_unit, unlimited, name, replaces), shadow_mode, quota_mode,
// detailed_metric, value_to_metric, share_threshold and nested
// descriptors. Unknown keys, bad units, negative counts, duplicate rules,
// duplicate domains, a name in replaces that no limit of the domain has,
// and share_threshold on a value that is no wildcard are a *ConfigError
// naming the file, the line and the field
// ("rl.yaml:12: descriptors[1].rate_limit.unit: ...").
//
// Load follows symlinks and skips names starting with ".", so a mounted
// Kubernetes ConfigMap loads; Service.Watch reloads the rules when the
// files change, a ConfigMap update (the kubelet renaming "..data_tmp"
// over "..data") included.
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
// uses per unit (second, minute, hour, day, week, month, year), and the
// cost is the request's hits_addend (0 means 1) or the descriptor's own
// hits_addend (0 there means look without counting).
//
// The units are counted in fixed windows aligned to the clock by default
// (Config.Algorithm "fixed-window"), as envoy counts them: second to week
// are multiples of the unit since the Unix epoch in UTC, and
// duration_until_reset is the whole seconds to the window's end. Month
// and year are calendar months and years in UTC with their real lengths,
// where envoy counts 30 and 365 days from the epoch. A refused call costs
// nothing, where envoy's counter counts it too. "sliding-window" keeps a
// client from getting twice the limit through around a window's edge.
//
// share_threshold on a wildcard rule makes every value it matches count
// in one counter: the key holds the wildcard ("path=files%2F*") instead of
// the value.
//
// Descriptors are counted independently, as in envoy: a request over the
// limit in one descriptor is still counted in the others, by at most 8
// goroutines at once. A request with more than Config.MaxDescriptors
// (default 64) descriptors fails with ResourceExhausted naming
// "descriptors". The overall code is OVER_LIMIT when any descriptor not in
// quota_mode is, or when every quota_mode descriptor is (a quota over its
// limit is OVER_LIMIT in its own status only). requests_per_unit 0 refuses every
// request without counting; so does a cost above the limit. unlimited
// answers OK with limit_remaining 4294967295. shadow_mode counts as usual
// and answers OK. Config.ShadowMode is envoy's process-wide SHADOW_MODE
// (a ringlimit node's --shadow sets it): a descriptor over its limit keeps
// its OVER_LIMIT status, but the overall code is OK. A store in shadow
// mode (limiter.Shadow) gives the same answers for the descriptors it
// counts. A limit named in the replaces list of another limit
// matched by the same request is not counted (its status is OK with no
// limit). is_negative_hits (giving uses back) is not supported: such a
// descriptor is answered without counting.
//
// A store error fails the whole call with its gRPC code (Unavailable,
// or ResourceExhausted for a key past the store's bound); Envoy's
// failure_mode_deny decides what the proxy does then.
//
// # Headers
//
// With Config.ResponseHeaders (envoy's LIMIT_RESPONSE_HEADERS_ENABLED),
// every answer carries RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (whole seconds, duration_until_reset rounded up) in
// response_headers_to_add, for the descriptor with the fewest uses left,
// or the last one over its limit, as envoy chooses.
//
// # Metrics
//
// Service.Collector gives envoy's statistics per domain and descriptor
// key, named as envoy's statsd-to-Prometheus mapping names them with
// _total added: ratelimit_service_rate_limit_total_hits_total,
// _over_limit_total, _near_limit_total (past 80% of the limit, envoy's
// NEAR_LIMIT_RATIO), _within_limit_total and _shadow_mode_total, labels
// domain and key; ratelimit_service_global_shadow_mode_total (requests
// answered OK only because the store is in shadow mode); and
// ratelimit_service_config_load_success_total and _error_total. They count hits (hits_addend) as envoy's base limiter
// does. The key is the rule's path (key or key_value per level, joined by
// "."); request values enter it only with detailed_metric,
// value_to_metric or a limit override, and at most Config.MaxMetricKeys
// such keys are kept (then a descriptor counts under its rule's key).
//
// Each rule's limit is named (limiter.Limit.Name, the limit label of a
// ringlimit node's decision metrics) by its domain and that rule's path:
// "mongo_cps.database_users". The name comes from the configuration only;
// a limit a request carries is unnamed.
package rls
