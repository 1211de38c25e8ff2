package worker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestForeignDecision: the worker's decision before a claim (mode 89).
func TestForeignDecision(t *testing.T) {
	ours, other := uuid.New(), uuid.New()
	readErr := errors.New("database unreachable")
	cases := []struct {
		name    string
		message uuid.UUID
		ours    uuid.UUID
		oursErr error
		want    foreignVerdict
	}{
		{"ours", ours, ours, nil, verdictClaim},
		{"another installation's", other, ours, nil, verdictForward},
		{"an older binary's, naming none", uuid.Nil, ours, nil, verdictClaim},
		{"naming none while ours is unreadable", uuid.Nil, uuid.Nil, readErr, verdictClaim},
		{"naming one while ours is unreadable", other, uuid.Nil, readErr, verdictUndecided},
		{"naming one while ours reads as nil", other, uuid.Nil, nil, verdictUndecided},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := foreignDecision(c.ours, c.oursErr, core.Dispatch{Installation: c.message}); got != c.want {
				t.Fatalf("foreignDecision = %d, want %d", got, c.want)
			}
		})
	}
}

// TestForeignLogLimiterLetsOneLineThroughPerInterval: the first line at
// once, then none until foreignLogEvery has passed, and that one says how
// many were held back.
func TestForeignLogLimiterLetsOneLineThroughPerInterval(t *testing.T) {
	var l foreignLogLimiter
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if n, ok := l.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %d, %v; want 0, true", n, ok)
	}
	for i := range 3 {
		if _, ok := l.allow(t0.Add(time.Duration(i+1) * time.Second)); ok {
			t.Fatalf("line %d within the interval let through", i+2)
		}
	}
	if n, ok := l.allow(t0.Add(foreignLogEvery)); !ok || n != 3 {
		t.Fatalf("after the interval: %d, %v; want 3, true", n, ok)
	}
}

// twoInstallations is two rigs, two databases, on one queue: a's worker
// is started by the test, b's later.
type twoInstallations struct{ a, b *rig }

const foreignWorkflow = "name: shared\ntasks:\n  - {name: x, handler: noop}\n"

func newTwoInstallations(t *testing.T) twoInstallations {
	t.Helper()
	reg := core.NewRegistry()
	reg.MustRegister("noop", func(context.Context, core.Task) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
	a := newRig(t, reg, nil)
	b := newRig(t, reg, func(c *Config) { c.Broker.Queue = a.broker.Queue; c.ID = "rig-worker-b" })
	b.broker.Queue = a.broker.Queue
	a.signals.foreign, a.signals.lost = make(chan foreignSent, 64), make(chan uuid.UUID, 64)
	a.w.signals = a.signals
	for _, r := range []*rig{a, b} {
		storetest.Apply(t, r.st, foreignWorkflow)
	}
	return twoInstallations{a: a, b: b}
}

// awaitForeign waits up to within for a's next dispatch sent back.
func (two twoInstallations) awaitForeign(t *testing.T, within time.Duration) foreignSent {
	t.Helper()
	select {
	case f := <-two.a.signals.foreign:
		return f
	case <-time.After(within):
		t.Fatalf("no foreign dispatch sent back within %v", within)
		return foreignSent{}
	}
}

// noLostClaims fails the test when a's worker acked a lost claim.
func (two twoInstallations) noLostClaims(t *testing.T) {
	t.Helper()
	select {
	case id := <-two.a.signals.lost:
		t.Fatalf("a's worker acked task %s as a lost claim", id)
	default:
	}
}

// TestAWorkerSendsAnotherInstallationsDispatchBackAndRunsItsOwn: b's
// dispatch reaches only a's worker (b's is not running): a forwards it,
// again and again, as a fresh copy (x-delivery-count 0, so no delivery
// limit can dead-letter it), never claims or acks it away, and runs its
// own dispatch published behind it; once b's worker runs, b's task
// succeeds on attempt 1. Before mode 89, a acked it as a lost claim
// (unknown_task) and b's task stayed READY.
func TestAWorkerSendsAnotherInstallationsDispatchBackAndRunsItsOwn(t *testing.T) {
	two := newTwoInstallations(t)
	a, b := two.a, two.b
	theirs := storetest.Trigger(t, b.st, "shared", "")
	theirTask := b.taskOf(theirs, "x").ID
	a.start()
	b.publish()
	for i := range 3 {
		f := two.awaitForeign(t, 30*time.Second)
		if f.ID != theirTask || f.Outcome != "forwarded" || f.DeliveryCount != 0 {
			t.Fatalf("sent back #%d: %+v, want task %s forwarded, delivered fresh (count 0)", i+1, f, theirTask)
		}
	}
	own := storetest.Trigger(t, a.st, "shared", "")
	a.publish()
	if f := a.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded || f.Req.ID != a.taskOf(own, "x").ID {
		t.Fatalf("a's own task: %+v, want it SUCCEEDED past b's circulating dispatch", f)
	}
	two.noLostClaims(t)
	if d := b.taskOf(theirs, "x"); d.State != "READY" || d.Attempt != 0 {
		t.Fatalf("b's task is %s attempt %d while only a's worker runs, want READY attempt 0", d.State, d.Attempt)
	}
	if n := testutil.ToFloat64(a.metrics.ForeignDispatches.WithLabelValues("forwarded")); n < 3 {
		t.Fatalf("flowforge_foreign_dispatches_total{outcome=forwarded} = %v, want at least 3", n)
	}
	b.start()
	if f := b.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded || f.Req.ID != theirTask {
		t.Fatalf("b's task: %+v, want SUCCEEDED", f)
	}
	if d := b.taskOf(theirs, "x"); d.Attempt != 1 {
		t.Fatalf("b's task ran by attempt %d, want 1", d.Attempt)
	}
	two.noLostClaims(t)
	a.wantNoDeadLetters()
}

// TestAForeignDispatchWhoseCopyCannotBeConfirmedIsRequeued: when a's
// forwarder cannot publish (its broker refuses connections), the dispatch
// is nacked with requeue, never acked or dead-lettered, and b's worker
// runs it.
func TestAForeignDispatchWhoseCopyCannotBeConfirmedIsRequeued(t *testing.T) {
	two := newTwoInstallations(t)
	a, b := two.a, two.b
	a.w.forwarder.cfg.URLs = []string{"amqp://guest:guest@127.0.0.1:1/"}
	a.w.forwarder.cfg.DialTimeout = 500 * time.Millisecond
	theirs := storetest.Trigger(t, b.st, "shared", "")
	a.start()
	b.publish()
	for i := range 2 {
		if f := two.awaitForeign(t, 30*time.Second); f.Outcome != "requeued" {
			t.Fatalf("sent back #%d: %+v, want requeued", i+1, f)
		}
	}
	if n := testutil.ToFloat64(a.metrics.ForeignDispatches.WithLabelValues("forwarded")); n != 0 {
		t.Fatalf("%v forwarded through a broker that refuses connections", n)
	}
	b.start()
	if f := b.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
		t.Fatalf("b's task: %+v, want SUCCEEDED", f)
	}
	if d := b.taskOf(theirs, "x"); d.Attempt != 1 {
		t.Fatalf("b's task ran by attempt %d, want 1", d.Attempt)
	}
	two.noLostClaims(t)
	a.wantNoDeadLetters()
}

// TestADispatchNamingNoInstallationKeepsTodaysBehaviour: an older binary's
// dispatch (no installation) of b reaching a's worker is claimed in a's
// database, lost, and acked (unknown_task), as before mode 89: a worker
// cannot tell whose it is.
func TestADispatchNamingNoInstallationKeepsTodaysBehaviour(t *testing.T) {
	two := newTwoInstallations(t)
	a, b := two.a, two.b
	theirs := storetest.Trigger(t, b.st, "shared", "")
	d := b.taskOf(theirs, "x")
	body, err := json.Marshal(core.Dispatch{V: 1, TaskRunID: d.ID, RunID: theirs, FencingToken: 1, Task: "x", Handler: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	a.start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := broker.DialPublisher(ctx, a.broker)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if out, err := p.PublishBatch(ctx, []broker.Message{{ID: "1", Body: body}}); err != nil || out[0] != broker.Confirmed {
		t.Fatalf("publish: %v %v", out, err)
	}
	select {
	case id := <-a.signals.lost:
		if id != d.ID {
			t.Fatalf("lost claim of %s, want %s", id, d.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a's worker never settled the dispatch naming no installation")
	}
	if n := testutil.ToFloat64(a.metrics.ClaimsLost.WithLabelValues("unknown_task")); n != 1 {
		t.Fatalf("claims lost (unknown_task) %v, want 1", n)
	}
	select {
	case f := <-a.signals.foreign:
		t.Fatalf("a dispatch naming no installation was sent back: %+v", f)
	default:
	}
}

// wantNoDeadLetters fails the test when the rig's dead-letter queue holds
// a message.
func (r *rig) wantNoDeadLetters() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, _, err := broker.QueueDepth(ctx, broker.Config{URLs: r.broker.URLs, Queue: broker.DeadLetterQueue(r.broker.Queue)})
	if err != nil || n != 0 {
		r.t.Fatalf("dead-letter queue: %d messages, %v; want 0", n, err)
	}
}
