package fallback

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/throttle"
	"github.com/ringlimit/ringlimit/limiter"
)

// LogEvery is the least time between two log lines of one failure
// episode: during an outage every call fails, so the log is throttled.
const LogEvery = 10 * time.Second

// The messages of a FailureLog, for log searches and alerts.
const (
	// MsgFailed is the first failure of an episode, logged at once (WARN).
	MsgFailed = "rate limit store failed"
	// MsgStillFailing is logged at most once every LogEvery while the
	// failures go on (WARN); its attribute not_logged counts the failures
	// since the previous line that were not logged.
	MsgStillFailing = "rate limit store still failing"
	// MsgRecovered is logged by the first success after failures (INFO);
	// its attribute failures counts every failure of the episode.
	MsgRecovered = "rate limit store recovered"
)

// FailureLog logs store failures without flooding the log: each failure
// gets a correlation id (returned, so it can travel in the answer), the
// first of an episode is logged at once, then at most one line every
// LogEvery saying how many were not logged, and the first success
// afterwards logs the recovery and how many failures it ended.
//
// It is safe for concurrent use. Success costs one atomic load while the
// store is healthy, so it can sit on a hot path. Used by Store and by the
// httplimit and grpclimit middlewares.
type FailureLog struct {
	logger  *slog.Logger
	clock   limiter.Clock
	failing atomic.Bool
	idBase  uint64
	seq     atomic.Uint64

	mu       sync.Mutex
	throttle throttle.Throttle // paces the lines of an episode
	failures int64             // failures of this episode
}

// NewFailureLog returns a FailureLog writing to logger (nil: slog.Default())
// and reading time from clock (nil: limiter.RealClock).
func NewFailureLog(logger *slog.Logger, clock limiter.Clock) *FailureLog {
	if logger == nil {
		logger = slog.Default()
	}
	if clock == nil {
		clock = limiter.RealClock
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &FailureLog{logger: logger, clock: clock, idBase: binary.LittleEndian.Uint64(b[:]), throttle: throttle.Throttle{Every: LogEvery}}
}

// Failure records one failure and returns its correlation id (16 hex
// digits, unique within the process). It logs MsgFailed with attributes
// id and err when the failure starts an episode, MsgStillFailing with id,
// err and not_logged when LogEvery has passed since the last line, and
// nothing otherwise.
func (l *FailureLog) Failure(err error) string {
	id := l.newID()
	now := l.clock.Now()
	l.mu.Lock()
	l.failures++
	first := !l.failing.Load()
	if first {
		l.failing.Store(true)
	}
	logIt, notLogged := l.throttle.Hit(now)
	l.mu.Unlock()
	if !logIt {
		return id
	}
	ctx := context.Background()
	if first {
		l.logger.LogAttrs(ctx, slog.LevelWarn, MsgFailed, slog.String("id", id), slog.Any("err", err))
	} else {
		l.logger.LogAttrs(ctx, slog.LevelWarn, MsgStillFailing, slog.String("id", id), slog.Any("err", err), slog.Int64("not_logged", notLogged))
	}
	return id
}

// Success records a call the store answered. The first success after
// failures logs MsgRecovered with the attribute failures (the failures of
// the episode it ends); otherwise it only reads one atomic flag.
func (l *FailureLog) Success() {
	if !l.failing.Load() {
		return
	}
	l.mu.Lock()
	if !l.failing.Load() {
		l.mu.Unlock()
		return
	}
	n := l.failures
	l.failing.Store(false)
	l.failures = 0
	l.throttle.Reset()
	l.mu.Unlock()
	l.logger.LogAttrs(context.Background(), slog.LevelInfo, MsgRecovered, slog.Int64("failures", n))
}

// Failing reports whether the last call recorded was a failure.
func (l *FailureLog) Failing() bool { return l.failing.Load() }

func (l *FailureLog) newID() string {
	x := splitmix(l.idBase + l.seq.Add(1))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], x)
	return hex.EncodeToString(b[:])
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
