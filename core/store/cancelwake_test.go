package store_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// TestDecodeCancelWakeReadsWhatTheCancelSays: run ids are named, the
// all-runs item or a reconnect (nil items) asks for every running task,
// and an item that is no run id names nothing.
func TestDecodeCancelWakeReadsWhatTheCancelSays(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	for _, tc := range []struct {
		name  string
		items []string
		runs  []uuid.UUID
		all   bool
	}{
		{"two runs", []string{a.String(), b.String()}, []uuid.UUID{a, b}, false},
		{"every run", []string{store.CancelAllRuns}, nil, true},
		{"a reconnect", nil, nil, true},
		{"an empty payload", []string{""}, nil, false},
		{"garbage beside a run", []string{"x", a.String()}, []uuid.UUID{a}, false},
	} {
		w := store.DecodeCancelWake(tc.items)
		if w.AllRuns != tc.all || !slices.Equal(w.Runs, tc.runs) {
			t.Errorf("%s: %+v, want runs %v all %v", tc.name, w, tc.runs, tc.all)
		}
	}
}
