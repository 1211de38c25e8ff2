package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedLoopMakesNTimedCallsAfterTheWarmUps: with N, the loops make N
// timed calls between them, each timed, after Loops × Warm untimed ones.
func TestClosedLoopMakesNTimedCallsAfterTheWarmUps(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	r := runClosedLoop(context.Background(), closedLoad{Loops: 4, Warm: 2, N: 50}, func(context.Context) error {
		calls.Add(1)
		return nil
	})
	if r.Calls != 50 || len(r.LatMS) != 50 || r.Errors != 0 || r.FirstError != "" {
		t.Errorf("result %+v, want 50 timed calls and no error", r)
	}
	if n := calls.Load(); n != 4*2+50 {
		t.Errorf("%d calls made, want 8 warm-ups and 50 timed", n)
	}
	if r.Seconds <= 0 {
		t.Errorf("seconds = %v, want > 0", r.Seconds)
	}
}

// TestClosedLoopStartsTheClockOnceEveryLoopIsWarm: no timed call begins
// before every loop's warm-up call has returned.
func TestClosedLoopStartsTheClockOnceEveryLoopIsWarm(t *testing.T) {
	t.Parallel()
	const loops = 4
	var calls, warmed, early atomic.Int64
	runClosedLoop(context.Background(), closedLoad{Loops: loops, Warm: 1, N: 20}, func(context.Context) error {
		if calls.Add(1) <= loops {
			time.Sleep(10 * time.Millisecond)
			warmed.Add(1)
			return nil
		}
		if warmed.Load() < loops {
			early.Add(1)
		}
		return nil
	})
	if n := early.Load(); n > 0 {
		t.Errorf("%d timed calls began before every warm-up returned", n)
	}
}

// TestClosedLoopRunsForItsWindow: without N the loops call until the
// window has passed, and the seconds cover it.
func TestClosedLoopRunsForItsWindow(t *testing.T) {
	t.Parallel()
	window := 60 * time.Millisecond
	r := runClosedLoop(context.Background(), closedLoad{Loops: 3, Window: window}, func(context.Context) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	if r.Calls < 3 || int64(len(r.LatMS)) != r.Calls {
		t.Errorf("result %+v: want calls from every loop, each timed", r)
	}
	if r.Seconds < window.Seconds() {
		t.Errorf("seconds = %v, want at least the window's %v", r.Seconds, window.Seconds())
	}
	for _, l := range r.LatMS {
		if l < 2 {
			t.Fatalf("a call of at least 2 ms timed at %v ms", l)
		}
	}
}

// TestClosedLoopCountsFailedCalls: a failed timed call is counted, not
// timed, and the load goes on; the first error is kept.
func TestClosedLoopCountsFailedCalls(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	r := runClosedLoop(context.Background(), closedLoad{Loops: 1, N: 10}, func(context.Context) error {
		if calls.Add(1)%2 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	if r.Calls != 5 || r.Errors != 5 || len(r.LatMS) != 5 || r.FirstError != "refused" {
		t.Errorf("result %+v, want 5 timed calls, 5 errors, the first kept", r)
	}
}

// TestClosedLoopStopsOnAFailedWarmUp: a warm-up that fails ends the load
// before its clock starts: no timed call, the error kept.
func TestClosedLoopStopsOnAFailedWarmUp(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	r := runClosedLoop(context.Background(), closedLoad{Loops: 3, Warm: 2, N: 100}, func(context.Context) error {
		calls.Add(1)
		return errors.New("no such workflow")
	})
	if r.Calls != 0 || r.Errors != 3 || r.FirstError != "no such workflow" || r.Seconds != 0 || len(r.LatMS) != 0 {
		t.Errorf("result %+v, want nothing timed and each loop's failed warm-up counted", r)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls, want one per loop (each stops at its failed warm-up)", n)
	}
}

// TestClosedLoopEndsWithItsContext: a cancelled context ends a long
// window early.
func TestClosedLoopEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	done := make(chan closedResult)
	go func() {
		done <- runClosedLoop(ctx, closedLoad{Loops: 2, Window: time.Hour}, func(context.Context) error {
			time.Sleep(time.Millisecond)
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the load outlived its context")
	}
}
