package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
)

// fakeStore is a database whose clock the test sets and whose reads can
// fail; it records what each Reap was asked, and what each AdvanceRuns.
type fakeStore struct {
	now  time.Time
	down bool
	// reapErr, advanceErr: what Reap (after recording its request) and
	// AdvanceRuns return when the database is up.
	reapErr, advanceErr error
	reaps               []store.ReapRequest
	advanced            [][]uuid.UUID
}

var errDown = errors.New("database down")

// errRefused is an answer of the database: a statement gave up waiting
// for a lock (lock_timeout).
var errRefused = fmt.Errorf("lock named runs: %w", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"})

func (f *fakeStore) Now(context.Context) (time.Time, error) {
	if f.down {
		return time.Time{}, errDown
	}
	return f.now, nil
}

func (f *fakeStore) Reap(_ context.Context, req store.ReapRequest) (store.ReapResult, error) {
	if f.down {
		return store.ReapResult{}, errDown
	}
	f.reaps = append(f.reaps, req)
	return store.ReapResult{}, f.reapErr
}

func (f *fakeStore) Advance(context.Context, *store.Cursor, int, string) (store.AdvanceResult, error) {
	if f.down {
		return store.AdvanceResult{}, errDown
	}
	return store.AdvanceResult{}, nil
}

func (f *fakeStore) AdvanceRuns(_ context.Context, ids []uuid.UUID, _ string) (store.AdvanceResult, error) {
	f.advanced = append(f.advanced, ids)
	if f.down {
		return store.AdvanceResult{}, errDown
	}
	return store.AdvanceResult{Runs: len(ids)}, f.advanceErr
}

func (f *fakeStore) SweepCandidates(context.Context, int, store.Cursor) ([]uuid.UUID, store.Cursor, error) {
	if f.down {
		return nil, store.Cursor{}, errDown
	}
	return nil, store.Cursor{}, nil
}

func (f *fakeStore) Redispatch(context.Context, time.Duration, int, string) (int, error) {
	if f.down {
		return 0, errDown
	}
	return 0, nil
}

func (f *fakeStore) Admit(context.Context, string, string) (store.AdmitResult, error) {
	if f.down {
		return store.AdmitResult{}, errDown
	}
	return store.AdmitResult{}, nil
}

// TestTheSchedulerGrantsGraceOnlyAfterItsOwnOutage: mode 35. A pass after
// a failed pass, or one that starts long after the previous one (on the
// database clock), hands the reaper an outage from the last good pass to
// now; regular passes hand none, and every reap is bounded by NotAfter.
func TestTheSchedulerGrantsGraceOnlyAfterItsOwnOutage(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // database clock, from t0
		down bool
		// refused: the database answers, and refuses the reap (a lock
		// timeout): no outage.
		refused bool
		// lostAfterReach: the clock is read, then the reap finds the
		// database gone.
		lostAfterReach bool
		// wantOutage is the outage the reap must be given (nil: none).
		wantOutage *store.Outage
	}
	o := func(since, until time.Duration) *store.Outage {
		return &store.Outage{Since: t0.Add(since), Until: t0.Add(until)}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"regular passes", []step{{at: 0}, {at: time.Second}, {at: 2 * time.Second}}},
		{"a failed pass", []step{{at: 0}, {at: time.Second, down: true}, {at: 3 * time.Second, wantOutage: o(0, 3*time.Second)},
			{at: 4 * time.Second, wantOutage: o(0, 3*time.Second)}}},
		{"a pass that failed first", []step{{at: 0, down: true}, {at: time.Second, wantOutage: &store.Outage{Until: t0.Add(time.Second)}}}},
		{"a gap past the sweep and OutageGap", []step{{at: 0}, {at: 1900 * time.Millisecond}, {at: 4 * time.Second, wantOutage: o(1900*time.Millisecond, 4*time.Second)}}},
		// Mode 83: a pass the database refused is no outage, and it
		// reached the database: the next gap counts from it.
		{"a refused pass", []step{{at: 0}, {at: 1500 * time.Millisecond, refused: true}, {at: 3 * time.Second}, {at: 4 * time.Second}}},
		{"a refused pass, then a gap", []step{{at: 0}, {at: time.Second, refused: true}, {at: 3500 * time.Millisecond, wantOutage: o(0, 3500*time.Millisecond)}}},
		// After an outage a sweep that reached the database and then lost
		// it again: the next outage still begins at the last sweep that
		// completed, before the first one.
		{"an outage, then a pass lost after reaching the database", []step{{at: 0}, {at: time.Second, down: true}, {at: 2 * time.Second, lostAfterReach: true, wantOutage: o(0, 2*time.Second)},
			{at: 2500 * time.Millisecond, wantOutage: o(0, 2500*time.Millisecond)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStore{}
			s, err := New(Config{Store: f, SweepInterval: time.Second, OutageGap: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				f.now, f.down = t0.Add(st.at), st.down
				f.reapErr = nil
				switch {
				case st.refused:
					f.reapErr = errRefused
				case st.lostAfterReach:
					f.reapErr = errDown
				}
				err := s.RunOnce(t.Context())
				if failing := st.down || st.refused || st.lostAfterReach; failing {
					if err == nil {
						t.Fatalf("step %d: a failing pass returned nil", i)
					}
					if lost := s.lost(err); lost == st.refused { // what Run does with a failed pass
						t.Fatalf("step %d: lost(%v) = %v", i, err, lost)
					}
					if st.down {
						continue
					}
				} else if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := f.reaps[len(f.reaps)-1]
				if want := f.now.Add(time.Second); !got.NotAfter.Equal(want) {
					t.Fatalf("step %d: NotAfter %v, want %v", i, got.NotAfter, want)
				}
				switch {
				case st.wantOutage == nil && got.Outage != nil:
					t.Fatalf("step %d: outage %+v granted without an outage", i, *got.Outage)
				case st.wantOutage != nil && (got.Outage == nil || !got.Outage.Since.Equal(st.wantOutage.Since) || !got.Outage.Until.Equal(st.wantOutage.Until)):
					t.Fatalf("step %d: outage %+v, want %+v", i, got.Outage, *st.wantOutage)
				}
			}
		})
	}
}

// TestAFailedTargetedPassKeepsItsRunsAndOnlyALostDatabaseSkipsTheSweep:
// modes 83 and 57. A targeted pass the database refused (a lock timeout)
// keeps its runs for a later turn, and the turn still sweeps (the reaper
// ran) with no outage recorded; one that could not reach the database
// keeps its runs too, ends the turn (its sweep would fail as well) and is
// the scheduler's loss of the database.
func TestAFailedTargetedPassKeepsItsRunsAndOnlyALostDatabaseSkipsTheSweep(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantSwept bool
	}{
		{"refused", errRefused, true},
		{"unreachable", errDown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStore{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), advanceErr: tc.err}
			s, err := New(Config{Store: f})
			if err != nil {
				t.Fatal(err)
			}
			run := uuid.New()
			runs := daemon.NewRunSet()
			runs.Add(run)
			err = s.turn(t.Context(), runs, true)
			if swept := len(f.reaps) == 1; swept != tc.wantSwept {
				t.Fatalf("turn = %v; swept %v, want %v", err, swept, tc.wantSwept)
			}
			if (err == nil) != tc.wantSwept {
				t.Fatalf("turn = %v, want an error only when the database could not be reached", err)
			}
			if err != nil && !s.lost(err) {
				t.Fatalf("lost(%v) = false for an unreachable database", err)
			}
			if s.failed != !tc.wantSwept {
				t.Fatalf("failed = %v after a %s targeted pass", s.failed, tc.name)
			}
			if d, ok := s.held.wait(time.Now()); !ok || d > HeldRetryFirst {
				t.Fatalf("the failed pass's run is not kept for a retry within %s (kept %v, due in %s)", HeldRetryFirst, ok, d)
			}
			f.advanceErr = nil
			if ids := s.held.take(time.Now().Add(HeldRetryFirst)); len(ids) != 1 || ids[0] != run {
				t.Fatalf("the retry due takes %v, want the failed pass's run %s", ids, run)
			}
		})
	}
}

// TestHeldRunsAreRetriedPacedNotInALoop: mode 83. A run kept again by every
// retry is retried HeldRetryFirst after it was first kept, then twice as
// late each time, at most once a SweepInterval (a session left holding it
// costs one pass a sweep interval); the ramp starts afresh once a retry
// kept nothing. A run kept while a retry is pending joins that retry.
func TestHeldRunsAreRetriedPacedNotInALoop(t *testing.T) {
	const sweep = time.Second
	h := newHeldRuns(sweep)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	run, other := uuid.New(), uuid.New()
	if ids := h.take(now); ids != nil {
		t.Fatalf("an empty set took %v", ids)
	}
	h.keep(now, run)
	var delays []time.Duration
	var capped []bool
	for range 8 {
		d, ok := h.wait(now)
		if !ok {
			t.Fatal("the kept run has no retry")
		}
		if ids := h.take(now.Add(d - time.Nanosecond)); ids != nil {
			t.Fatalf("took %v before the retry was due", ids)
		}
		now = now.Add(d)
		delays = append(delays, d)
		if ids := h.take(now); len(ids) != 1 || ids[0] != run {
			t.Fatalf("the due retry took %v, want %s", ids, run)
		}
		capped = append(capped, h.keep(now, run)) // still held
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, sweep, sweep, sweep}
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Fatalf("retry delays %v, want %v", delays, want)
	}
	if fmt.Sprint(capped) != fmt.Sprint([]bool{false, false, false, false, true, false, false, false}) {
		t.Fatalf("keep reported the cap reached at %v, want once, when the delay first reached the sweep interval", capped)
	}
	h.keep(now.Add(10*time.Millisecond), other)
	if d, _ := h.wait(now); d != sweep {
		t.Fatalf("a run kept while a retry is pending is due in %s, want with it (%s)", d, sweep)
	}
	now = now.Add(sweep)
	if ids := h.take(now); len(ids) != 2 {
		t.Fatalf("the retry took %v, want both runs", ids)
	}
	h.take(now.Add(time.Millisecond)) // a turn that retried nothing: the kept runs were advanced
	h.keep(now, run)
	if d, _ := h.wait(now); d != HeldRetryFirst {
		t.Fatalf("a run held afresh is retried in %s, want %s", d, HeldRetryFirst)
	}
}
