package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rateLimitHeaders are the headers Envoy adds to the response when
// Config.ResponseHeaders is on, as envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED writes them: the descriptor's
// requests_per_unit, its remaining uses, and the whole seconds until it
// resets (its duration_until_reset, rounded up).
func (c *compiled) rateLimitHeaders(st *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := st.GetDurationUntilReset().AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	return []*corev3.HeaderValue{
		{Key: c.limitHeader, Value: strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: c.remainHeader, Value: strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)},
		{Key: c.resetHeader, Value: strconv.FormatInt(secs, 10)},
	}
}
