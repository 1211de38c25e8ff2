package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestStoreSourceShowsHeldTasksAndTheWayToAChildRun: against real
// PostgreSQL, a run whose tasks the scheduler holds, read through
// StoreSource, shows on the Run screen its sleep's time left, its wait's
// event and key and its child run; o on the child's task opens the child
// run, which names its parent; esc comes back to the parent.
func TestStoreSourceShowsHeldTasksAndTheWayToAChildRun(t *testing.T) {
	t.Parallel()
	s, _ := storetest.New(t)
	storetest.Apply(t, s, "name: shipping\ntasks:\n  - {name: pack, handler: noop}\n")
	storetest.Apply(t, s, `
name: order
tasks:
  - {name: nap, sleep: {for: 24h}}
  - {name: approve, wait_for: {event: order.approved, key: "params.order_id", timeout: 7d}}
  - {name: ship, workflow: {name: shipping}}
`)
	run := storetest.Trigger(t, s, "order", `{"order_id": "ORDER-17"}`)
	if _, err := s.Advance(t.Context(), nil, 100, "test"); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: New(NewStoreSource(s, "test"), Options{NoColor: true})}
	h.size(160, 30)
	h.send(openRunMsg{id: run.String()})
	h.readRun(run)
	v := h.view()
	for _, want := range []string{"sleeps, due in 23h59m (", "waits for order.approved key ORDER-17, 6d23h left", " (shipping, ", "1 child run"} {
		if !strings.Contains(v, want) {
			t.Errorf("the Run screen lacks %q:\n%s", want, v)
		}
	}
	for i, r := range h.m.run.tbl.rows {
		if strings.TrimSpace(r.cells[0]) == "ship" {
			h.m.run.tbl.cursor = i
		}
	}
	child, ok := h.m.run.selectedChild()
	if !ok {
		t.Fatalf("ship has no child run on the Run screen:\n%s", v)
	}
	h.keys("o")
	h.readRun(child)
	if v := h.view(); !strings.Contains(v, "shipping v1") || !strings.Contains(v, "child of run "+shortID(run)+" (task ship, depth 1) · u opens it") {
		t.Errorf("the child's Run screen does not name its parent:\n%s", v)
	}
	h.keys("esc")
	h.readRun(run)
}

// readRun reads the Run screen until it shows run id (a read that takes
// longer than the harness waits for a command is dropped: read again),
// within a deadline.
func (h *harness) readRun(id uuid.UUID) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !(h.m.cur == scrRun && h.m.run.loaded && h.m.run.data.Run.ID == id) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the Run screen did not show run %s (screen %d, run %s, loaded %v)", id, h.m.cur, h.m.run.id, h.m.run.loaded)
		}
		h.m.inflight[scrRun] = false
		h.run(h.m.fetch(scrRun))
	}
}
