package scheduler

import (
	"time"

	"github.com/google/uuid"
)

// HeldRetryFirst is how long after a targeted pass handed back a run
// (another transaction held its row, or the pass failed) the scheduler
// passes it again, when nothing else was waiting for a retry (at most
// SweepInterval; see heldRuns).
const HeldRetryFirst = 50 * time.Millisecond

// heldRuns are the runs the scheduler's targeted passes could not advance
// and must pass again: those another transaction held
// (store.AdvanceResult.Held) and those of a batch that failed. Forgetting
// one would leave it to the sweep, or, for a change the sweep's candidates
// cannot see, to the full pass; the finish that named it may be the one a
// holder that was itself a pass did not see.
//
// They are retried together once due, and paced so that a run held for
// good (a forgotten psql session) costs one cheap pass a SweepInterval,
// never a loop: a set kept from empty is due HeldRetryFirst later; runs
// kept again by the turn that retried them are due twice as late as the
// previous retry, up to SweepInterval (max). A run held briefly (another
// scheduler's pass, a requeue) is thus passed again within milliseconds.
// Owned by the Run loop's goroutine (and RunOnce's): not safe for
// concurrent use.
type heldRuns struct {
	ids      map[uuid.UUID]struct{}
	due      time.Time     // process clock; meaningful while ids is not empty
	delay    time.Duration // between the retry due and when it was kept
	max      time.Duration
	retrying bool // the current turn took the runs due (take)
}

func newHeldRuns(max time.Duration) *heldRuns {
	return &heldRuns{ids: map[uuid.UUID]struct{}{}, max: max}
}

// keep adds ids to the retry due next. It reports whether this keep made
// the retry delay reach its cap (a run has stayed held through the whole
// ramp: worth a warning, once a streak).
func (h *heldRuns) keep(now time.Time, ids ...uuid.UUID) (capped bool) {
	if len(ids) == 0 {
		return false
	}
	if len(h.ids) == 0 {
		first := min(HeldRetryFirst, h.max)
		next := first
		if h.retrying {
			next = min(2*h.delay, h.max)
		}
		capped = next == h.max && h.delay < h.max && h.retrying
		h.delay, h.due = next, now.Add(next)
	}
	for _, id := range ids {
		h.ids[id] = struct{}{}
	}
	return capped
}

// take returns, and forgets, every run kept once the retry is due (nil
// before). Each turn calls it first: a run kept again later in a turn that
// took some is kept again from a retry (its delay doubles).
func (h *heldRuns) take(now time.Time) []uuid.UUID {
	h.retrying = false
	if len(h.ids) == 0 || now.Before(h.due) {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(h.ids))
	for id := range h.ids {
		ids = append(ids, id)
	}
	clear(h.ids)
	h.retrying = true
	return ids
}

// wait returns how long until the retry is due (0: now), and false when
// no run is kept.
func (h *heldRuns) wait(now time.Time) (time.Duration, bool) {
	if len(h.ids) == 0 {
		return 0, false
	}
	return max(h.due.Sub(now), 0), true
}

// union returns a followed by the ids of b that a lacks.
func union(a, b []uuid.UUID) []uuid.UUID {
	if len(a) == 0 {
		return b
	}
	seen := make(map[uuid.UUID]struct{}, len(a))
	for _, id := range a {
		seen[id] = struct{}{}
	}
	for _, id := range b {
		if _, ok := seen[id]; !ok {
			a = append(a, id)
		}
	}
	return a
}
