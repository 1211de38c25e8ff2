package worker

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRunningAttemptsAdmitOneDeliveryPerTaskAndToken: mode 82 at the set
// itself. A key is taken once while its attempt runs; another token of the
// task is another attempt; a recorded end frees the key at once, an
// unrecorded one (the finish gave up: the row may stay RUNNING at the
// token until reaped, and a read-back would match it) only after linger.
func TestRunningAttemptsAdmitOneDeliveryPerTaskAndToken(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	linger := time.Minute
	id := uuid.New()
	k, next := attemptKey{id: id, token: 2}, attemptKey{id: id, token: 3}
	tests := []struct {
		name string
		do   func(a *runningAttempts) bool // the start under test
		want bool
	}{
		{"first delivery", func(a *runningAttempts) bool { return a.start(k, t0) }, true},
		{"second delivery while the first runs", func(a *runningAttempts) bool {
			a.start(k, t0)
			return a.start(k, t0)
		}, false},
		{"another token of the task", func(a *runningAttempts) bool {
			a.start(k, t0)
			return a.start(next, t0)
		}, true},
		{"after a recorded end", func(a *runningAttempts) bool {
			a.start(k, t0)
			a.end(k, true, t0, linger)
			return a.start(k, t0)
		}, true},
		{"within linger of an unrecorded end", func(a *runningAttempts) bool {
			a.start(k, t0)
			a.end(k, false, t0, linger)
			return a.start(k, t0.Add(linger-time.Nanosecond))
		}, false},
		{"once linger has passed", func(a *runningAttempts) bool {
			a.start(k, t0)
			a.end(k, false, t0, linger)
			return a.start(k, t0.Add(linger))
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a runningAttempts
			if got := tc.do(&a); got != tc.want {
				t.Errorf("start = %v, want %v", got, tc.want)
			}
		})
	}
}
