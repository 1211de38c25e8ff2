package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// errLostReply stands for a claim statement that committed on the server
// and whose reply never reached the worker (the connection broke).
var errLostReply = errors.New("test: the claim committed and its reply was lost")

// claimFaults is the real store with faults around ClaimMany: plan, asked
// for each batch, may hold the statement until a channel closes (before
// it is sent) and may lose its reply (after it committed).
type claimFaults struct {
	*store.Store
	plan func(reqs []store.ClaimRequest) (hold <-chan struct{}, loseReply bool)
}

func (s *claimFaults) ClaimMany(ctx context.Context, reqs []store.ClaimRequest, workerID string, lease time.Duration) ([]store.ClaimResult, error) {
	hold, lose := s.plan(reqs)
	if hold != nil {
		<-hold
	}
	res, err := s.Store.ClaimMany(ctx, reqs, workerID, lease)
	if err == nil && lose {
		return nil, errLostReply
	}
	return res, err
}

// holds reports whether reqs ask for task id.
func holds(reqs []store.ClaimRequest, id uuid.UUID) bool {
	for _, q := range reqs {
		if q.ID == id {
			return true
		}
	}
	return false
}

// sendCopies publishes n copies of task id's pending outbox row to the
// rig's queue (a redelivered, republished or redispatched dispatch: the
// same task and fencing token) and stamps the row published.
func (r *rig) sendCopies(id uuid.UUID, n int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var row int64
	var body string
	if err := r.db.QueryRowContext(ctx, `SELECT id, payload::text FROM outbox WHERE task_run_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&row, &body); err != nil {
		r.t.Fatal(err)
	}
	p, err := broker.DialPublisher(ctx, r.broker)
	if err != nil {
		r.t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.Message{ID: strconv.FormatInt(row, 10), Body: []byte(body)}
	}
	out, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		r.t.Fatalf("publish: %v", err)
	}
	for _, o := range out {
		if o != broker.Confirmed {
			r.t.Fatalf("outbox row %d: %s", row, o)
		}
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE outbox SET published_at = now() WHERE task_run_id = $1`, id); err != nil {
		r.t.Fatal(err)
	}
}

// handlerCalls counts a handler's calls by task run and reports each call.
type handlerCalls struct {
	mu    sync.Mutex
	n     map[string]int
	calls chan string
	// block, when set, holds every call of the task run it names until
	// the channel closes.
	block   string
	release chan struct{}
}

func newHandlerCalls() *handlerCalls {
	return &handlerCalls{n: map[string]int{}, calls: make(chan string, 16), release: make(chan struct{})}
}

func (h *handlerCalls) handler(_ context.Context, task core.Task) (json.RawMessage, error) {
	h.mu.Lock()
	h.n[task.TaskRunID]++
	block := h.block == task.TaskRunID
	h.mu.Unlock()
	h.calls <- task.TaskRunID
	if block {
		<-h.release
	}
	return nil, nil
}

func (h *handlerCalls) count(id uuid.UUID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id.String()]
}

// awaitSecondCopySettled waits until the second delivery of task id is
// done with: acked as lost (what must happen) or running the handler a
// second time (the defect).
func awaitSecondCopySettled(t *testing.T, r *rig, h *handlerCalls, id uuid.UUID) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case lost := <-r.signals.lost:
			if lost == id {
				return
			}
		case <-h.calls:
			if h.count(id) >= 2 {
				return
			}
		case <-timeout:
			t.Fatalf("the second delivery of %s was neither acked as lost nor run", id)
		}
	}
}

// TestTwoCopiesOfADispatchWhoseBatchLostItsReplyRunOnce: mode 82. Two
// copies of one dispatch land in one claim batch, and the batch's
// statement commits but its reply is lost: each delivery is read back on
// its own, and the read-back (RUNNING for this worker at the claim's
// token) matches for both. Only one may run. The batch is forced: the
// worker runs one claim statement at a time and a first delivery's claim
// is held until both copies wait behind it, so they are gathered together.
func TestTwoCopiesOfADispatchWhoseBatchLostItsReplyRunOnce(t *testing.T) {
	h := newHandlerCalls()
	reg := core.NewRegistry()
	reg.MustRegister("count", h.handler)
	first := make(chan struct{})
	entered := make(chan struct{}, 1)
	var lead, dup uuid.UUID
	var lost atomic.Bool // only the first batch of dup loses its reply
	faults := &claimFaults{plan: func(reqs []store.ClaimRequest) (<-chan struct{}, bool) {
		if holds(reqs, lead) {
			entered <- struct{}{}
			return first, false
		}
		return nil, holds(reqs, dup) && lost.CompareAndSwap(false, true)
	}}
	r := newRig(t, reg, func(c *Config) { c.Concurrency = 4 })
	faults.Store = r.st
	r.w.cfg.Store = faults
	r.w.statementsInFlight = 1
	r.signals.lost = make(chan uuid.UUID, 8)
	r.signals.received = make(chan uuid.UUID, 8)
	r.w.signals = r.signals
	storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: count}\n")
	lead = r.taskOf(storetest.Trigger(t, r.st, "one", ""), "a").ID
	dup = r.taskOf(storetest.Trigger(t, r.st, "one", ""), "a").ID
	// The copy that runs is held until the other is settled: had it
	// finished first, the other's read-back would see SUCCEEDED and lose
	// its claim whether or not the worker knows what runs (CI saw the
	// mutant worker-runs-every-copy-of-a-dispatch survive that way).
	h.block = dup.String()
	r.start()

	r.sendCopies(lead, 1)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first delivery's claim never started")
	}
	r.sendCopies(dup, 2)
	for range 3 {
		select {
		case <-r.signals.received:
		case <-time.After(20 * time.Second):
			t.Fatal("not every copy reached the worker")
		}
	}
	// One copy is the next batch's head (it holds a slot, beside the held
	// first delivery's, and waits for the statement in flight), the other
	// waits behind it in pending: the head's gather then takes it.
	deadline := time.Now().Add(20 * time.Second)
	for len(r.w.pending) != 1 || len(r.w.slots) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries wait in pending and %d slots are taken, want 1 and 2", len(r.w.pending), len(r.w.slots))
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	close(first)
	awaitSecondCopySettled(t, r, h, dup)
	close(h.release)
	for range 2 {
		if f := r.awaitFinished(30 * time.Second); !f.OK || f.State != core.TaskSucceeded {
			t.Fatalf("finish %+v, want SUCCEEDED", f)
		}
	}
	if n := h.count(dup); n != 1 {
		t.Errorf("the handler ran %d times for one dispatch, want 1", n)
	}
	if v := testutil.ToFloat64(r.metrics.ClaimsLost.WithLabelValues("duplicate")); v != 1 {
		t.Errorf("claims lost as duplicates = %v, want 1", v)
	}
}

// TestACopyWhoseClaimLostItsReplyDoesNotRunBesideTheAnsweredCopy: mode
// 82, across two batches. One copy's claim is answered and its handler
// runs (held); a second copy's claim loses its reply (the statement ran
// and matched nothing: the task is RUNNING), and its read-back matches
// the running attempt. It must be acked as a duplicate, not run beside it.
func TestACopyWhoseClaimLostItsReplyDoesNotRunBesideTheAnsweredCopy(t *testing.T) {
	h := newHandlerCalls()
	reg := core.NewRegistry()
	reg.MustRegister("count", h.handler)
	var mu sync.Mutex
	claims := 0
	var id uuid.UUID
	faults := &claimFaults{plan: func(reqs []store.ClaimRequest) (<-chan struct{}, bool) {
		mu.Lock()
		defer mu.Unlock()
		if holds(reqs, id) {
			claims++
			return nil, claims > 1
		}
		return nil, false
	}}
	r := newRig(t, reg, func(c *Config) { c.Concurrency = 4 })
	faults.Store = r.st
	r.w.cfg.Store = faults
	r.signals.lost = make(chan uuid.UUID, 8)
	r.w.signals = r.signals
	storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: count}\n")
	id = r.taskOf(storetest.Trigger(t, r.st, "one", ""), "a").ID
	h.block = id.String()
	r.start()

	r.sendCopies(id, 1)
	select {
	case <-h.calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the first copy never ran")
	}
	r.sendCopies(id, 1)
	awaitSecondCopySettled(t, r, h, id)
	close(h.release)
	if f := r.awaitFinished(30 * time.Second); !f.OK || f.State != core.TaskSucceeded {
		t.Fatalf("finish %+v, want SUCCEEDED", f)
	}
	if n := h.count(id); n != 1 {
		t.Errorf("the handler ran %d times for one dispatch, want 1", n)
	}
}
