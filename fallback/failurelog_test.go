package fallback_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// The throttle as a step table over named instants.
func TestFailureLogThrottle(t *testing.T) {
	logger, buf := newLogger()
	clock := limiter.NewFakeClock(t0)
	fl := fallback.NewFailureLog(logger, clock)
	boom := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	const errText = `err="dial tcp 10.0.0.7:6379: connection refused"`

	var want []string
	ids := map[string]bool{}
	steps := []struct {
		at      time.Duration // since t0
		fail    bool
		logLine string // %s is the failure's id; "" for no line
	}{
		{0, true, `level=WARN msg="rate limit store failed" id=%s ` + errText},
		{time.Second, true, ""},
		{5 * time.Second, true, ""},
		{10*time.Second - time.Nanosecond, true, ""},
		{10 * time.Second, true, `level=WARN msg="rate limit store still failing" id=%s ` + errText + ` not_logged=3`},
		{15 * time.Second, true, ""},
		{25 * time.Second, true, `level=WARN msg="rate limit store still failing" id=%s ` + errText + ` not_logged=1`},
		{26 * time.Second, false, `level=INFO msg="rate limit store recovered" failures=7`},
		{27 * time.Second, false, ""},
		// A new episode logs its first failure at once again.
		{28 * time.Second, true, `level=WARN msg="rate limit store failed" id=%s ` + errText},
		{29 * time.Second, false, `level=INFO msg="rate limit store recovered" failures=1`},
	}
	for i, st := range steps {
		clock.Advance(t0.Add(st.at).Sub(clock.Now()))
		if st.fail {
			id := fl.Failure(boom)
			if len(id) != 16 || ids[id] {
				t.Fatalf("step %d: id %q is not 16 hex digits or not unique", i, id)
			}
			ids[id] = true
			if st.logLine != "" {
				want = append(want, fmt.Sprintf(st.logLine, id))
			}
		} else {
			fl.Success()
			if st.logLine != "" {
				want = append(want, st.logLine)
			}
		}
		if got := buf.Lines(); len(got) != len(want) || (len(want) > 0 && got[len(got)-1] != want[len(want)-1]) {
			t.Fatalf("step %d (t0+%v, fail %v): log\n got  %q\n want %q", i, st.at, st.fail, got, want)
		}
	}
	if fl.Failing() {
		t.Error("Failing after recovery")
	}
}

// The Store logs its failures through a FailureLog with its policy.
func TestStoreFailureLog(t *testing.T) {
	logger, buf := newLogger()
	clock := limiter.NewFakeClock(t0)
	st := newSlowStore(t)
	s, err := fallback.New(st, fallback.Config{Policy: fallback.Deny, Logger: logger, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx())
	st.failWith(errors.New("redis: connection pool timeout"))
	var ids []string
	for i := range 4 {
		v, err := limiter.Consume(ctx(), s, "k", minute)
		var fe *fallback.FailureError
		if err != nil || v.Allowed || !errors.As(v.Failure, &fe) {
			t.Fatalf("call %d: %+v, %v", i, v, err)
		}
		ids = append(ids, fe.ID)
		clock.Advance(4 * time.Second) // calls at 0, 4, 8, 12 s
	}
	st.failWith(nil)
	if v, err := limiter.Consume(ctx(), s, "k", minute); err != nil || !v.Allowed || v.Failure != nil {
		t.Fatalf("after recovery: %+v, %v", v, err)
	}
	const e = `err="redis: connection pool timeout"`
	wantLines(t, buf.Lines(),
		`level=WARN msg="rate limit store failed" policy=deny id=`+ids[0]+` `+e,
		`level=WARN msg="rate limit store still failing" policy=deny id=`+ids[3]+` `+e+` not_logged=2`,
		`level=INFO msg="rate limit store recovered" policy=deny failures=4`,
	)
}
