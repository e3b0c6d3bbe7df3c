package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Header names, in canonical form (HTTP header names are case-blind).
const (
	hLimit      = "Ratelimit-Limit"
	hRemaining  = "Ratelimit-Remaining"
	hReset      = "Ratelimit-Reset"
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hXLimit     = "X-Ratelimit-Limit"
	hXRemaining = "X-Ratelimit-Remaining"
	hXReset     = "X-Ratelimit-Reset"
	hRetryAfter = "Retry-After"
)

// ceilSeconds rounds d up to whole seconds; 0 or less is 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// figures are the numbers every header set gives for v at now: the
// uses left, the seconds until the quota is whole, and, for a refusal, the
// seconds until the call could pass (0 when allowed). A shadowed verdict
// (served, though over the limit) gives 0 left and the refusal's wait as
// the reset, with nothing to retry.
func figures(v *limiter.Verdict, now time.Time) (remaining, reset, retry int64) {
	remaining, reset = v.Remaining, ceilSeconds(v.ResetAt.Sub(now))
	if v.Shadowed {
		// Served, though the limit would have refused: the quota is
		// spent until the refusal's wait is over, but there is nothing
		// to retry.
		return 0, max(ceilSeconds(v.RetryAfter), 1), 0
	}
	if !v.Allowed {
		// The quota is not whole when the batch could pass, but the
		// client's useful number is when it can come back.
		remaining = 0
		retry = max(ceilSeconds(v.RetryAfter), 1)
		reset = retry
	}
	return max(remaining, 0), reset, retry
}

// windowSeconds is a window in whole seconds, rounded up (the draft's w).
func windowSeconds(d time.Duration) int64 {
	w := d / time.Second
	if d%time.Second != 0 {
		w++
	}
	return int64(w)
}

// quotePolicy writes a policy name as the draft's string item.
func quotePolicy(name string) string { return strconv.Quote(name) }

// appendPolicy appends one RateLimit-Policy item: "name";q=100;w=60.
func appendPolicy(b []byte, quoted string, uses, window int64) []byte {
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, uses, 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, window, 10)
}

// appendRateLimit appends one RateLimit item: "name";r=42;t=17.
func appendRateLimit(b []byte, quoted string, remaining, reset int64) []byte {
	b = append(b, quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, reset, 10)
}

// Policy is one quota named in the draft headers (see SetDraftHeaders).
type Policy struct {
	// Name identifies the quota to the client, e.g. "default".
	Name string
	// Limit is the quota: q is its Uses, w its Window in seconds
	// (rounded up).
	Limit limiter.Limit
}

// SetDraftHeaders sets the headers that the middleware sets with
// HeadersDraft, for a verdict decided outside it (the node's JSON API
// uses it): RateLimit-Policy with one item per policy, RateLimit with the
// verdict's figures under each policy's name, and Retry-After (whole
// seconds, at least 1) when v is a refusal. A verdict answers a whole
// batch, which passes only when every entry does, so every policy gets the
// batch's figures: r is the tightest entry's remaining uses (0 when
// refused), t the seconds until every entry's quota is whole (refused: until
// the batch could pass). now is the clock v was decided by.
func SetDraftHeaders(h http.Header, v limiter.Verdict, now time.Time, policies ...Policy) {
	remaining, reset, retry := figures(&v, now)
	var pol, rl []byte
	for i, p := range policies {
		if i > 0 {
			pol = append(pol, ", "...)
			rl = append(rl, ", "...)
		}
		q := quotePolicy(p.Name)
		pol = appendPolicy(pol, q, p.Limit.Uses, windowSeconds(p.Limit.Window))
		rl = appendRateLimit(rl, q, remaining, reset)
	}
	if len(policies) > 0 {
		h[hPolicy] = []string{string(pol)}
		h[hRateLimit] = []string{string(rl)}
	}
	if retry > 0 {
		h[hRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	}
}

// writeHeaders sets the rate-limit headers of v. All values are written
// into one string and one slice, so a request costs two allocations
// whatever the header set.
func (l *Limiter) writeHeaders(h http.Header, ru *rule, v *limiter.Verdict) {
	now := l.opts.Clock.Now()
	remaining, reset, retry := figures(v, now)
	set := l.opts.Headers
	var buf [160]byte
	b := buf[:0]
	var ends [9]int
	var keys [9]string
	n := 0
	mark := func(k string) {
		keys[n], ends[n] = k, len(b)
		n++
	}
	if set&HeadersStandard != 0 {
		b = strconv.AppendInt(b, ru.limit.Uses, 10)
		mark(hLimit)
		b = strconv.AppendInt(b, remaining, 10)
		mark(hRemaining)
		b = strconv.AppendInt(b, reset, 10)
		mark(hReset)
	}
	if set&HeadersDraft != 0 {
		b = appendPolicy(b, ru.policy, ru.limit.Uses, ru.window)
		mark(hPolicy)
		b = appendRateLimit(b, ru.policy, remaining, reset)
		mark(hRateLimit)
	}
	if set&HeadersLegacy != 0 {
		b = strconv.AppendInt(b, ru.limit.Uses, 10)
		mark(hXLimit)
		b = strconv.AppendInt(b, remaining, 10)
		mark(hXRemaining)
		// Unix seconds, rounded up, of the moment given by reset.
		at := now.Add(time.Duration(reset) * time.Second)
		if v.Allowed && !v.Shadowed {
			at = v.ResetAt
		}
		secs := at.Unix()
		if at.Nanosecond() > 0 {
			secs++
		}
		b = strconv.AppendInt(b, secs, 10)
		mark(hXReset)
	}
	if retry > 0 {
		b = strconv.AppendInt(b, retry, 10)
		mark(hRetryAfter)
	}
	s := string(b)
	vals := make([]string, n)
	start := 0
	for i := 0; i < n; i++ {
		vals[i] = s[start:ends[i]]
		start = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
}

// problem is an RFC 9457 problem detail.
type problem struct {
	Type          string `json:"type"`
	Title         string `json:"title"`
	Status        int    `json:"status"`
	Detail        string `json:"detail"`
	Instance      string `json:"instance"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// ProblemContentType is the media type of the error bodies (RFC 9457).
const ProblemContentType = "application/problem+json"

func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	writeProblemID(w, r, status, detail, "")
}

// writeProblemID answers status with a problem+json body; id, when set,
// is the failure's correlation id (an extension member).
func writeProblemID(w http.ResponseWriter, r *http.Request, status int, detail, id string) {
	body, err := json.Marshal(problem{
		Type:          "about:blank",
		Title:         http.StatusText(status),
		Status:        status,
		Detail:        detail,
		Instance:      r.URL.EscapedPath(),
		CorrelationID: id,
	})
	if err != nil {
		// Strings and an int always marshal; keep the status anyway.
		body = nil
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
