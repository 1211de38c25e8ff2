package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// fakeStore is a database whose clock the test sets and whose reads can
// fail; it records what each Reap was asked.
type fakeStore struct {
	now   time.Time
	down  bool
	reaps []store.ReapRequest
}

var errDown = errors.New("database down")

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
	return store.ReapResult{}, nil
}

func (f *fakeStore) Advance(context.Context, *store.Cursor, int, string) (store.AdvanceResult, error) {
	if f.down {
		return store.AdvanceResult{}, errDown
	}
	return store.AdvanceResult{}, nil
}

func (f *fakeStore) AdvanceRuns(context.Context, []uuid.UUID, string) (store.AdvanceResult, error) {
	if f.down {
		return store.AdvanceResult{}, errDown
	}
	return store.AdvanceResult{}, nil
}

func (f *fakeStore) SweepCandidates(context.Context, int) ([]uuid.UUID, error) {
	if f.down {
		return nil, errDown
	}
	return nil, nil
}

func (f *fakeStore) Redispatch(context.Context, time.Duration, int, string) (int, error) {
	if f.down {
		return 0, errDown
	}
	return 0, nil
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
				err := s.RunOnce(t.Context())
				if st.down {
					if err == nil {
						t.Fatalf("step %d: pass with the database down returned nil", i)
					}
					s.failed = true // what Run does with a failed pass
					continue
				}
				if err != nil {
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
