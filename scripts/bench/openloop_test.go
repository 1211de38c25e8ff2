package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOpenScheduleArithmetic(t *testing.T) {
	tests := []struct {
		name   string
		s      openSchedule
		n      int
		due    int
		dueAt  time.Duration
		lastAt time.Duration
	}{
		{"make bench: 500/s for 60 s", openSchedule{Rate: 500, Window: time.Minute}, 30000, 1, 2 * time.Millisecond, 59998 * time.Millisecond},
		{"make bench-quick: 500/s for 10 s", openSchedule{Rate: 500, Window: 10 * time.Second}, 5000, 250, 500 * time.Millisecond, 9998 * time.Millisecond},
		{"a rate that does not divide the second", openSchedule{Rate: 3, Window: time.Second}, 3, 2, 666666666, 666666666},
		{"a fraction of a trigger is not issued", openSchedule{Rate: 2.5, Window: time.Second}, 2, 1, 400 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.count(); got != tt.n {
				t.Errorf("count = %d, want %d", got, tt.n)
			}
			if got := tt.s.due(tt.due); got != tt.dueAt {
				t.Errorf("due(%d) = %v, want %v", tt.due, got, tt.dueAt)
			}
			if got := tt.s.due(tt.n - 1); got != tt.lastAt {
				t.Errorf("the last trigger is due at %v, want %v (inside the window)", got, tt.lastAt)
			}
		})
	}
	if n := (openSchedule{Window: time.Second}).count(); n != 0 {
		t.Errorf("no rate: %d triggers, want 0", n)
	}
}

// TestOpenLoopKeepsItsSchedule: with triggerers to spare, every trigger is
// issued on time and the loop lasts its window.
func TestOpenLoopKeepsItsSchedule(t *testing.T) {
	t.Parallel()
	sched := openSchedule{Rate: 200, Window: 250 * time.Millisecond}
	r := runOpenLoop(context.Background(), sched, 8, func(context.Context) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	if r.Triggered != 50 || r.Errors != 0 || len(r.LagsMS) != 50 {
		t.Fatalf("result %+v: want 50 triggers, no errors, 50 lags", r)
	}
	if r.Seconds < 0.24 {
		t.Errorf("the loop took %.3f s, want at least its window (the last trigger is due at 245 ms)", r.Seconds)
	}
	if m := percentile(r.LagsMS, 50); m > 20 {
		t.Errorf("median lag %.1f ms with idle triggerers, want a few ms at most", m)
	}
}

// TestOpenLoopRecordsItsLag: one triggerer that takes 10 ms against a
// trigger due every 2 ms falls behind, and the lags say by how much.
func TestOpenLoopRecordsItsLag(t *testing.T) {
	t.Parallel()
	sched := openSchedule{Rate: 500, Window: 40 * time.Millisecond}
	r := runOpenLoop(context.Background(), sched, 1, func(context.Context) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	if len(r.LagsMS) != 20 || r.Triggered != 20 {
		t.Fatalf("result %+v: want all 20 triggers issued, late", r)
	}
	// Trigger i starts at about 10·i ms and is due at 2·i ms.
	if last := r.LagsMS[19]; last < 19*8 {
		t.Errorf("the last trigger was %.1f ms late, want at least %d", last, 19*8)
	}
	if r.LagsMS[19] <= r.LagsMS[1] {
		t.Errorf("lags %v do not grow", r.LagsMS)
	}
}

func TestOpenLoopCountsFailuresAndStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	r := runOpenLoop(ctx, openSchedule{Rate: 1000, Window: time.Hour}, 1, func(context.Context) error {
		if calls++; calls == 5 {
			cancel()
		}
		return errors.New("refused")
	})
	// The sixth may be in the hand-over when the context ends; no more.
	if r.Errors < 5 || r.Errors > 6 || r.Triggered != 0 || r.FirstError != "refused" || len(r.LagsMS) != int(r.Errors) {
		t.Errorf("result %+v: want 5 (or 6) failed triggers, each with its lag, then the loop ended with its context", r)
	}
}
