package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestAWorkerClaimsRunsAndFinishesADispatchedTask: a dispatch on the queue
// is claimed (READY -> RUNNING with the message's token), its handler runs
// with the task's params, and the result is recorded: SUCCEEDED, counted
// once as claimed and once as finished.
func TestAWorkerClaimsRunsAndFinishesADispatchedTask(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("echo", func(_ context.Context, task core.Task) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"params":%s,"attempt":%d}`, task.Params, task.Attempt)), nil
	})
	r := newRig(t, reg, nil)
	storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: echo, params: {greeting: hi}}\n")
	run := storetest.Trigger(t, r.st, "one", "")
	r.start()
	if n := r.publish(); n != 1 {
		t.Fatalf("%d dispatches, want 1", n)
	}
	f := r.awaitFinished(30 * time.Second)
	if f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
		t.Fatalf("finish: state %s ok %v err %v, want SUCCEEDED recorded", f.State, f.OK, f.Err)
	}
	d := r.taskOf(run, "a")
	if d.State != "SUCCEEDED" || d.Attempt != 1 {
		t.Fatalf("task: %s attempt %d, want SUCCEEDED by attempt 1", d.State, d.Attempt)
	}
	var res struct {
		Params  map[string]string `json:"params"`
		Attempt int               `json:"attempt"`
	}
	if err := json.Unmarshal(d.Result, &res); err != nil || res.Params["greeting"] != "hi" || res.Attempt != 1 {
		t.Fatalf("result %s (%v), want the handler's echo of params and attempt 1", d.Result, err)
	}
	var claimed bool
	for _, e := range d.Events {
		if e.ToState == "RUNNING" && e.WorkerID != nil && *e.WorkerID == "rig-worker" {
			claimed = true
		}
	}
	if !claimed {
		t.Fatalf("no claim by rig-worker in the history: %+v", d.Events)
	}
	if c, s := testutil.ToFloat64(r.metrics.TasksClaimed), testutil.ToFloat64(r.metrics.TasksFinished.WithLabelValues("SUCCEEDED")); c != 1 || s != 1 {
		t.Fatalf("claimed %v, finished SUCCEEDED %v; want 1 and 1", c, s)
	}
}

// TestAWorkerHandsBackADispatchForAHandlerItLacks: mode 32 at the worker.
// Within UnknownHandlerGrace the delivery is requeued unclaimed (no
// attempt used; the history says what the task waits for); past it the
// claim goes ahead and the attempt fails permanently, naming the handler.
func TestAWorkerHandsBackADispatchForAHandlerItLacks(t *testing.T) {
	const wf = "name: orphan\ntasks:\n  - {name: a, handler: elsewhere, retry: {max_attempts: 5}}\n"
	t.Run("within the grace", func(t *testing.T) {
		r := newRig(t, core.NewRegistry(), func(c *Config) { c.UnknownHandlerGrace = time.Hour })
		storetest.Apply(t, r.st, wf)
		run := storetest.Trigger(t, r.st, "orphan", "")
		r.start()
		r.publish()
		id := r.awaitHandedBack(30 * time.Second)
		r.awaitHandedBack(30 * time.Second) // and again: it circulates, unclaimed
		d := r.taskOf(run, "a")
		if id != d.ID || d.State != "READY" || d.Attempt != 0 {
			t.Fatalf("task %s: %s attempt %d after hand-backs of %s; want READY, never claimed", d.ID, d.State, d.Attempt, id)
		}
		var noted bool
		for _, e := range d.Events {
			if e.Reason != nil && strings.HasPrefix(*e.Reason, store.WaitingReasonPrefix+"elsewhere") {
				noted = true
			}
		}
		if !noted {
			t.Fatalf("the history does not say the task waits for handler elsewhere: %+v", d.Events)
		}
		if n := testutil.ToFloat64(r.metrics.HandedBack.WithLabelValues("unknown_handler")); n < 2 {
			t.Fatalf("flowforge_deliveries_handed_back_total{reason=unknown_handler} = %v, want at least 2", n)
		}
	})
	t.Run("the database does not say how long it waited", func(t *testing.T) {
		// Past the grace, but ReadyFor fails (a dropped connection): the
		// delivery is handed back, never claimed and failed.
		r := newRig(t, core.NewRegistry(), func(c *Config) { c.UnknownHandlerGrace = time.Millisecond })
		r.w.cfg.Store = readyForFails{r.st}
		storetest.Apply(t, r.st, wf)
		run := storetest.Trigger(t, r.st, "orphan", "")
		r.start()
		r.publish()
		r.awaitHandedBack(30 * time.Second)
		r.awaitHandedBack(30 * time.Second)
		if d := r.taskOf(run, "a"); d.State != "READY" || d.Attempt != 0 {
			t.Fatalf("task: %s attempt %d after ReadyFor failed; want READY, never claimed", d.State, d.Attempt)
		}
	})
	t.Run("past the grace", func(t *testing.T) {
		r := newRig(t, core.NewRegistry(), func(c *Config) { c.UnknownHandlerGrace = time.Millisecond })
		storetest.Apply(t, r.st, wf)
		run := storetest.Trigger(t, r.st, "orphan", "")
		r.start()
		r.publish()
		f := r.awaitFinished(30 * time.Second)
		if f.State != core.TaskDead || !f.Req.Permanent || !strings.Contains(f.Req.Error, `unknown handler "elsewhere"`) {
			t.Fatalf("finish %+v, want DEAD at once with an error naming the unknown handler", f)
		}
		if d := r.taskOf(run, "a"); d.State != "DEAD" || d.Attempt != 1 {
			t.Fatalf("task: %s after %d attempts, want DEAD after 1", d.State, d.Attempt)
		}
	})
}

// TestAPanickingHandlerIsRecordedAsAFailedAttemptWithThePanic: mode 33 at
// the worker. The panic is recovered: the attempt fails (retried by the
// policy) with the panic's text, is counted, and the worker carries on to
// run the retry.
func TestAPanickingHandlerIsRecordedAsAFailedAttemptWithThePanic(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("boom", func(_ context.Context, task core.Task) (json.RawMessage, error) {
		if task.Attempt == 1 {
			var m map[string]int
			m["nil map"] = 1 // panics: assignment to entry in nil map
		}
		return json.RawMessage(`{"survived":true}`), nil
	})
	r := newRig(t, reg, nil)
	storetest.Apply(t, r.st, "name: panics\ntasks:\n  - {name: a, handler: boom, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}\n")
	run := storetest.Trigger(t, r.st, "panics", "")
	r.start()
	r.publish()
	f := r.awaitFinished(30 * time.Second)
	if f.Req.Outcome != store.OutcomeFailed || f.State != core.TaskRetrying || f.Req.Permanent {
		t.Fatalf("finish %+v, want a failed attempt to retry", f)
	}
	if want := "handler panicked: assignment to entry in nil map"; !strings.Contains(f.Req.Error, want) {
		t.Fatalf("error %q does not carry %q", f.Req.Error, want)
	}
	if n := testutil.ToFloat64(r.metrics.HandlerPanics); n != 1 {
		t.Fatalf("flowforge_handler_panics_total = %v, want 1", n)
	}
	// The retry, promoted and dispatched as the scheduler would, runs on
	// the same worker.
	deadline := time.Now().Add(10 * time.Second)
	for st, _ := r.state(run, "a"); st != core.TaskReady; st, _ = r.state(run, "a") {
		if time.Now().After(deadline) {
			t.Fatalf("the retry was not promoted: task %s", st)
		}
		if _, err := r.st.Advance(context.Background(), nil, 100, "test-scheduler"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	r.publish()
	if f := r.awaitFinished(30 * time.Second); f.State != core.TaskSucceeded {
		t.Fatalf("the retry: %+v, want SUCCEEDED", f)
	}
}

// TestAResultRewrittenToBeStoredIsNotedAndCounted: mode 130. A handler
// returns text that is not JSON, with a NUL: the task SUCCEEDED with the
// text stored as a JSON string (U+FFFD for the NUL), the history's
// SUCCEEDED row says how the result was rewritten, and
// flowforge_results_rewritten_total counts it by how.
func TestAResultRewrittenToBeStoredIsNotedAndCounted(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("texty", func(context.Context, core.Task) (json.RawMessage, error) {
		return json.RawMessage("done\x00 at last"), nil
	})
	r := newRig(t, reg, nil)
	storetest.Apply(t, r.st, "name: texty\ntasks:\n  - {name: a, handler: texty}\n")
	run := storetest.Trigger(t, r.st, "texty", "")
	r.start()
	r.publish()
	if f := r.awaitFinished(30 * time.Second); f.State != core.TaskSucceeded {
		t.Fatalf("finish %+v, want SUCCEEDED", f)
	}
	d, err := r.st.GetTask(context.Background(), r.taskOf(run, "a").ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(d.Result), "\"done\ufffd at last\""; got != want {
		t.Fatalf("stored result %s, want %s", got, want)
	}
	want := "result rewritten: it was not a JSON document, so it is stored as a JSON string; NUL characters or invalid UTF-8 in it were replaced with U+FFFD"
	var noted bool
	for _, e := range d.Events {
		if e.ToState == core.TaskSucceeded && e.Reason != nil && *e.Reason == want {
			noted = true
		}
	}
	if !noted {
		t.Fatalf("no SUCCEEDED history row with reason %q: %+v", want, d.Events)
	}
	for how, n := range map[string]float64{core.ResultNotJSON: 1, core.ResultReplaced: 1, core.ResultTruncated: 0} {
		if got := testutil.ToFloat64(r.metrics.ResultsRewritten.WithLabelValues(how)); got != n {
			t.Fatalf("flowforge_results_rewritten_total{how=%q} = %v, want %v", how, got, n)
		}
	}
}

// state reads the state and token of the run's task called name.
func (r *rig) state(run uuid.UUID, name string) (core.TaskState, int64) {
	r.t.Helper()
	st, tok, err := r.st.TaskStateOf(context.Background(), r.taskOf(run, name).ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return st, tok
}

// partitionedRenewer is a heartbeat that never reaches the database: the
// worker keeps running its handler while its lease lapses.
type partitionedRenewer struct{}

func (partitionedRenewer) Renew(context.Context, uuid.UUID, int64, time.Duration) (store.RenewResult, error) {
	return store.RenewResult{}, errors.New("heartbeat connection partitioned (test)")
}

// TestAReapedWorkersFinishCannotOverwriteTheNewerAttempt: mode 10 at the
// worker. A real worker whose heartbeats cannot reach the database runs a
// handler the test holds. Meanwhile its lease expires, the reaper takes
// the task back, it is promoted and claimed again by another worker. Then
// the held handler returns: its finish carries the old fencing token,
// matches nothing, is counted in
// flowforge_stale_writes_rejected_total{op="finish"}, and the newer
// attempt, still RUNNING, then finishes with its own result.
func TestAReapedWorkersFinishCannotOverwriteTheNewerAttempt(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	reg := core.NewRegistry()
	reg.MustRegister("hold", func(context.Context, core.Task) (json.RawMessage, error) {
		started <- struct{}{}
		<-release
		return json.RawMessage(`{"by":"first"}`), nil
	})
	r := newRig(t, reg, func(c *Config) {
		c.Renewer, c.Lease, c.Concurrency, c.ID = partitionedRenewer{}, 300*time.Millisecond, 1, "first-worker"
	})
	storetest.Apply(t, r.st, "name: stale\ntasks:\n  - {name: a, handler: hold, retry: {max_attempts: 3}}\n")
	run := storetest.Trigger(t, r.st, "stale", "")
	r.start()
	t.Cleanup(unblock) // before the worker's stop (cleanups run last first)
	r.publish()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never started")
	}
	ctx := context.Background()
	tid := r.taskOf(run, "a").ID
	noDelay := func(core.RetryPolicy, int) time.Duration { return 0 }
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n != 1; {
		n = storetest.ReapExpired(t, r.st, 10, noDelay, "test-reaper")
		if time.Now().After(deadline) {
			t.Fatal("the lapsed lease was not reaped")
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for state
	}
	if _, err := r.st.Advance(ctx, nil, 100, "test-scheduler"); err != nil {
		t.Fatal(err)
	}
	st, token, err := r.st.TaskStateOf(ctx, tid)
	if err != nil || st != core.TaskReady {
		t.Fatalf("after the reap and a pass: %s (%v), want READY", st, err)
	}
	second, ok := storetest.Claim(t, r.st, tid, token, "second-worker", time.Minute)
	if !ok {
		t.Fatal("second claim lost")
	}

	// The first attempt finishes while the second is still RUNNING: the
	// state check alone would let it through; the fencing token must not.
	unblock()
	f := r.awaitFinished(10 * time.Second)
	if f.Err != nil || f.OK {
		t.Fatalf("the first attempt's finish: ok %v err %v, want rejected by the fencing token", f.OK, f.Err)
	}
	if n := testutil.ToFloat64(r.metrics.StaleWrites.WithLabelValues("finish")); n != 1 {
		t.Fatalf("flowforge_stale_writes_rejected_total{op=finish} = %v, want 1", n)
	}
	if st, tok, err := r.st.TaskStateOf(ctx, tid); err != nil || st != core.TaskRunning || tok != second.FencingToken {
		t.Fatalf("after the stale finish: %s token %d (err %v), want the second attempt still RUNNING with token %d", st, tok, err, second.FencingToken)
	}
	state, ok := storetest.Finish(t, r.st, store.FinishRequest{ID: tid, Token: second.FencingToken,
		WorkerID: "second-worker", Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"by":"second"}`)})
	if !ok || state != core.TaskSucceeded {
		t.Fatalf("second finish: state=%s ok=%v", state, ok)
	}
	d := r.taskOf(run, "a")
	if d.State != "SUCCEEDED" || d.Attempt != 2 || !strings.Contains(string(d.Result), `"second"`) {
		t.Fatalf("task: %s attempt %d result %s, want SUCCEEDED by attempt 2 with the second attempt's result", d.State, d.Attempt, d.Result)
	}
}

// readyForFails is a Store whose ReadyFor always fails, as it does when
// the worker's connection to the database drops.
type readyForFails struct{ *store.Store }

func (readyForFails) ReadyFor(context.Context, uuid.UUID) (time.Duration, bool, error) {
	return 0, false, errors.New("terminating connection due to administrator command")
}
