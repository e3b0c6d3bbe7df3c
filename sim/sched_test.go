package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// interleave runs tasks that each log a few steps with sleeps and signal
// waits in between, and returns the log.
func interleave(t *testing.T, seed uint64) string {
	t.Helper()
	s := NewScheduler(seed, 0)
	defer s.Close()
	p := s.NewProc("n1")
	rt := NewRuntime(p, t0, 1)
	var log []string
	sig := rt.NewSignal()
	for i := range 5 {
		rt.Go(func() {
			for j := range 3 {
				log = append(log, fmt.Sprintf("%d.%d@%v", i, j, s.Now()))
				if i == 0 && j == 1 {
					sig.Fire()
				}
				if j == 0 && i > 0 {
					_ = sig.Wait(context.Background())
				}
				_ = rt.Sleep(context.Background(), time.Duration(i%2)*time.Millisecond)
			}
		})
	}
	if err := s.Run(time.Hour); err != nil {
		t.Fatal(err)
	}
	return strings.Join(log, " ")
}

func TestSchedulerDeterministic(t *testing.T) {
	a, b := interleave(t, 7), interleave(t, 7)
	if a != b {
		t.Fatalf("seed 7 gave two interleavings:\n%s\n%s", a, b)
	}
	differ := false
	for seed := uint64(8); seed < 20 && !differ; seed++ {
		differ = interleave(t, seed) != a
	}
	if !differ {
		t.Fatal("seeds 8..19 all gave seed 7's interleaving: the seed chooses nothing")
	}
}

func TestSleepAndClockRate(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	fast := NewRuntime(p, t0, 1.01)
	slow := NewRuntime(p, t0, 0.99)
	var fastAt, slowAt time.Duration
	var fastClock time.Duration
	fast.Go(func() {
		_ = fast.Sleep(context.Background(), time.Second)
		fastAt, fastClock = s.Now(), fast.Now().Sub(t0)
	})
	slow.Go(func() {
		_ = slow.Sleep(context.Background(), time.Second)
		slowAt = s.Now()
	})
	if err := s.Run(time.Hour); err != nil {
		t.Fatal(err)
	}
	// A fast clock reaches its second early in virtual time.
	if fastAt >= slowAt || fastAt < 990*time.Millisecond || slowAt > 1011*time.Millisecond {
		t.Fatalf("fast woke at %v, slow at %v", fastAt, slowAt)
	}
	if fastClock < time.Second {
		t.Fatalf("the fast node read %v on its clock when its 1s sleep ended", fastClock)
	}
}

func TestContextDeadlineAndCancel(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	rt := NewRuntime(p, t0, 1)
	var got []string
	rt.Go(func() {
		ctx, cancel := rt.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		dl, _ := ctx.Deadline()
		got = append(got, fmt.Sprint(dl.Sub(t0)))
		// A standard-library child is cancelled with it, synchronously.
		child, cc := context.WithCancel(ctx)
		defer cc()
		err := rt.Sleep(ctx, time.Second)
		got = append(got, fmt.Sprint(err, "@", s.Now(), " child:", child.Err()))
		// A signal that never fires: the wait ends with the context.
		ctx2, cancel2 := rt.WithTimeout(context.Background(), time.Second)
		rt.Go(func() { _ = rt.Sleep(context.Background(), 10*time.Millisecond); cancel2() })
		err = rt.NewSignal().Wait(ctx2)
		got = append(got, fmt.Sprint(err, "@", s.Now()))
		// A wait on a standard-library context cancelled by another task.
		ctx3, cancel3 := context.WithCancel(context.Background())
		rt.Go(func() { _ = rt.Sleep(context.Background(), 5*time.Millisecond); cancel3() })
		err = rt.Sleep(ctx3, time.Hour)
		got = append(got, fmt.Sprint(err, "@", s.Now()))
	})
	if err := s.Run(time.Hour); err != nil {
		t.Fatal(err)
	}
	want := "100ms | context deadline exceeded@100ms child:context deadline exceeded | context canceled@110ms | context canceled@115ms"
	if g := strings.Join(got, " | "); g != want {
		t.Fatalf("got  %s\nwant %s", g, want)
	}
}

func TestSignalWinsOverContext(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	rt := NewRuntime(p, t0, 1)
	var err error = errors.New("not run")
	sig := rt.NewSignal()
	rt.Go(func() {
		ctx, cancel := rt.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		err = sig.Wait(ctx)
	})
	// Both at 1ms: the timer of the context was set first, then this one
	// fires the signal before the waiter runs again.
	s.At(time.Millisecond, sig.Fire)
	if e := s.Run(time.Hour); e != nil {
		t.Fatal(e)
	}
	if err != nil {
		t.Fatalf("Wait = %v, want nil: a signal fired by the time the waiter runs wins", err)
	}
}

func TestKillEndsTasksAndRunsDefers(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	rt := NewRuntime(p, t0, 1)
	var mu sync.Mutex
	var log []string
	note := func(x string) { mu.Lock(); log = append(log, x); mu.Unlock() }
	rt.Go(func() {
		defer note("deferred")
		_ = rt.Sleep(context.Background(), time.Hour)
		note("woke: must not happen")
	})
	s.At(time.Second, func() { p.Kill(); rt.Go(func() { note("started on a dead node") }) })
	if err := s.Run(2 * time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, ","); got != "deferred" {
		t.Fatalf("log = %q, want only the deferred call", got)
	}
}

func TestPause(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	rt := NewRuntime(p, t0, 1)
	var woke time.Duration
	rt.Go(func() {
		_ = rt.Sleep(context.Background(), 10*time.Millisecond)
		woke = s.Now()
	})
	s.At(5*time.Millisecond, func() { p.Pause(50 * time.Millisecond) })
	if err := s.Run(time.Hour); err != nil {
		t.Fatal(err)
	}
	if woke != 55*time.Millisecond {
		t.Fatalf("a task of a node paused 5..55ms woke at %v, want 55ms", woke)
	}
}

func TestWatchdog(t *testing.T) {
	s := NewScheduler(1, 200*time.Millisecond)
	defer s.Close()
	p := s.NewProc("n1")
	block := make(chan struct{})
	defer close(block)
	p.Go("blocker", func() { <-block })
	err := s.Run(time.Hour)
	if err == nil || !strings.Contains(err.Error(), "watchdog") || !strings.Contains(err.Error(), "blocker") {
		t.Fatalf("Run = %v, want the watchdog naming the blocked task", err)
	}
	if !strings.Contains(err.Error(), "TestWatchdog") {
		t.Fatalf("the watchdog's message lacks the blocked task's stack:\n%v", err)
	}
}

func TestPanicFailsTheRun(t *testing.T) {
	s := NewScheduler(1, 0)
	defer s.Close()
	p := s.NewProc("n1")
	p.Go("panicker", func() { panic("boom") })
	if err := s.Run(time.Hour); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Run = %v, want the panic", err)
	}
}
