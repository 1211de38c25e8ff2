package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// probe is a handler that blocks each task run until the test releases it
// and records which task runs ran side by side with the suspect.
type probe struct {
	mu       sync.Mutex
	suspect  uuid.UUID
	running  map[uuid.UUID]bool
	overlaps []string // what ran beside the suspect, as it was seen
	started  chan uuid.UUID
	release  map[uuid.UUID]chan struct{}
	released map[uuid.UUID]bool
	allFree  bool // set by freeAll: every later task run is released at once
}

func newProbe() *probe {
	return &probe{running: map[uuid.UUID]bool{}, started: make(chan uuid.UUID, 16),
		release: map[uuid.UUID]chan struct{}{}, released: map[uuid.UUID]bool{}}
}

// free releases task run id (once).
func (p *probe) free(id uuid.UUID) {
	ch := p.gate(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.released[id] {
		p.released[id] = true
		close(ch)
	}
}

// freeAll releases every task run the probe has seen, so that a failed
// test's worker can stop.
func (p *probe) freeAll() {
	p.mu.Lock()
	p.allFree = true
	ids := make([]uuid.UUID, 0, len(p.release))
	for id := range p.release {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.free(id)
	}
}

// gate returns the channel whose closing releases task run id.
func (p *probe) gate(id uuid.UUID) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release[id] == nil {
		p.release[id] = make(chan struct{})
		if p.allFree {
			p.released[id] = true
			close(p.release[id])
		}
	}
	return p.release[id]
}

func (p *probe) handle(ctx context.Context, task core.Task) (json.RawMessage, error) {
	id := uuid.MustParse(task.TaskRunID)
	release := p.gate(id)
	p.mu.Lock()
	p.running[id] = true
	if p.running[p.suspect] && len(p.running) > 1 {
		p.overlaps = append(p.overlaps, task.TaskRunID+" started while the suspect ran, or the reverse")
	}
	p.mu.Unlock()
	p.started <- id
	defer func() {
		p.mu.Lock()
		delete(p.running, id)
		p.mu.Unlock()
	}()
	select {
	case <-release:
		return json.RawMessage(`{}`), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// TestASuspectRunsAloneOnItsWorker: mode 129 at the worker. A crash
// suspect claimed while another handler runs waits at the gate (its
// handler does not start) until that handler ends; a task claimed after
// it waits too, until the suspect's handler has ended. The suspect's
// attempt is recorded as run alone (alone_token), and its finish clears
// the suspicion. Each step waits on the worker's own signals (a handler
// started, an attempt waiting at the gate), never on time.
func TestASuspectRunsAloneOnItsWorker(t *testing.T) {
	p := newProbe()
	reg := core.NewRegistry()
	reg.MustRegister("probe", p.handle)
	r := newRig(t, reg, func(c *Config) { c.Concurrency = 3 })
	r.signals.gateWaiting = make(chan uuid.UUID, 16)
	r.w.signals = r.signals
	storetest.Apply(t, r.st, "name: probe\ntasks:\n  - {name: a, handler: probe}\n")
	trigger := func(suspect bool) uuid.UUID {
		t.Helper()
		id := r.taskOf(storetest.Trigger(t, r.st, "probe", ""), "a").ID
		if suspect {
			// As the reaper leaves a task it took from a crashed worker
			// with others (the store's tests prove that part).
			if _, err := r.db.ExecContext(t.Context(), `UPDATE task_runs SET suspect = true WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			p.suspect = id
			p.mu.Unlock()
		}
		r.publish()
		return id
	}
	// next waits for the worker's next step: a handler that started or an
	// attempt that waits at the gate.
	next := func() (started bool, id uuid.UUID) {
		t.Helper()
		select {
		case id := <-p.started:
			return true, id
		case id := <-r.signals.gateWaiting:
			return false, id
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did nothing within 30s")
			return false, uuid.UUID{}
		}
	}
	want := func(wantStarted bool, wantID uuid.UUID, what string) {
		t.Helper()
		if started, id := next(); started != wantStarted || id != wantID {
			t.Fatalf("%s: got started=%v for %s; want started=%v for %s (overlaps %v)", what, started, id, wantStarted, wantID, p.overlaps)
		}
	}
	r.start()
	t.Cleanup(p.freeAll) // before the worker's stop: cleanups run last first
	first := trigger(false)
	want(true, first, "an ordinary task starts")
	suspect := trigger(true)
	want(false, suspect, "the suspect waits for the running handler")
	after := trigger(false)
	want(false, after, "a task claimed after the suspect waits behind it")
	p.free(first)
	want(true, suspect, "the suspect starts once the handler before it ended")
	p.free(suspect)
	want(true, after, "the task behind the suspect starts once the suspect ended")
	p.free(after)
	for range 3 {
		if f := r.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
			t.Fatalf("finish %+v; want SUCCEEDED", f)
		}
	}
	if len(p.overlaps) > 0 {
		t.Fatalf("handlers ran beside the suspect: %v", p.overlaps)
	}
	var stillSuspect bool
	var alone, token sql.NullInt64
	if err := r.db.QueryRowContext(t.Context(), `SELECT suspect, alone_token, fencing_token FROM task_runs WHERE id = $1`, suspect).Scan(&stillSuspect, &alone, &token); err != nil {
		t.Fatal(err)
	}
	if stillSuspect || !alone.Valid || alone != token {
		t.Fatalf("the suspect after its run: suspect %v, alone_token %v, token %v; want cleared, and marked alone at its token", stillSuspect, alone, token)
	}
	var marked int
	if err := r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM task_runs WHERE alone_token IS NOT NULL`).Scan(&marked); err != nil || marked != 1 {
		t.Fatalf("%d task runs marked alone (%v); want the suspect only", marked, err)
	}
}
