package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestTheRunAndTaskScreensSayWhatAWaitingTaskWaitsFor: a READY task
// waiting for its concurrency slot, and one for its rate limit, say so in
// the Run screen's ERROR column in core's words; the task screen too.
func TestTheRunAndTaskScreensSayWhatAWaitingTaskWaitsFor(t *testing.T) {
	t.Parallel()
	f := newFake()
	run := f.runs[0]
	waiting := func(n int, name, kind string) store.TaskRun {
		return store.TaskRun{ID: id(n), RunID: run.ID, Name: name, Handler: "noop", State: core.TaskReady, MaxAttempts: 3, DependsOn: deps(), FlowWait: str(kind)}
	}
	slot := waiting(701, "charge", "concurrency")
	slot.ConcurrencyKey, slot.FlowInUse, slot.FlowLimit = str("customer-42"), intp(5), intp(5)
	rate := waiting(702, "notify", "rate")
	perMs := int64(time.Minute / time.Millisecond)
	rate.RateKey, rate.FlowLimit, rate.FlowPerMs = str("stripe-api"), intp(100), &perMs
	run.Tasks = []store.TaskRun{slot, rate}
	run.TasksTotal, run.TasksDone = 2, 0
	f.runs[0], f.run = run, run
	f.task = store.TaskDetail{TaskRun: slot, Params: store.JSON(`null`)}
	f.task.Workflow = run.Workflow
	h := newHarness(t, f, Options{})
	h.keys("enter")
	for name, want := range map[string]string{
		"charge": "waiting: concurrency customer-42 (5/5)",
		"notify": "waiting: rate limit stripe-api 100/1m0s",
	} {
		if row := rowText(t, h, name); !strings.HasSuffix(row, want) {
			t.Errorf("row %q, want it to end %q", row, want)
		}
	}
	h.size(120, 30)
	h.keys("enter")
	if v := h.view(); !strings.Contains(v, "waiting: concurrency customer-42 (5/5)") {
		t.Errorf("the task screen does not say what the task waits for:\n%s", v)
	}
}

func intp(n int) *int { return &n }
