package daemon

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// TestARunSetGathersTheRunsNotified: notifications' run ids gather (each
// once) until Take empties the set; store.AnyRun or an item that is no run
// id asks for a sweep, a (re)connect (nil items) for a full one; Add puts
// ids back and AskSweep a sweep request, both kept for the next Take.
func TestARunSetGathersTheRunsNotified(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	sorted := func(ids []uuid.UUID) []uuid.UUID {
		return slices.SortedFunc(slices.Values(ids), func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	}
	for _, tc := range []struct {
		name  string
		feed  func(r *RunSet)
		want  []uuid.UUID
		any   bool
		recon bool
	}{
		{"nothing", func(*RunSet) {}, nil, false, false},
		{"ids, each once", func(r *RunSet) { r.Note([]string{a.String(), b.String()}); r.Note([]string{a.String()}) }, []uuid.UUID{a, b}, false, false},
		{"AnyRun", func(r *RunSet) { r.Note([]string{store.AnyRun}); r.Note([]string{a.String()}) }, []uuid.UUID{a}, true, false},
		{"an empty payload", func(r *RunSet) { r.Note([]string{""}) }, nil, true, false},
		{"a reconnect", func(r *RunSet) { r.Note(nil) }, nil, false, true},
		{"put back", func(r *RunSet) { r.Add(b); r.AskSweep(true) }, []uuid.UUID{b}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRunSet()
			tc.feed(r)
			got := r.Take()
			if !slices.Equal(sorted(got.IDs), sorted(tc.want)) || got.AnyRun != tc.any || got.Reconnected != tc.recon {
				t.Fatalf("Take = %+v; want ids %v, AnyRun %v, Reconnected %v", got, tc.want, tc.any, tc.recon)
			}
			if again := r.Take(); len(again.IDs) != 0 || again.AnyRun || again.Reconnected {
				t.Fatalf("a second Take = %+v; want nothing", again)
			}
		})
	}
}
