package cli_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	ffharness "github.com/flowforge/flowforge/e2e/harness"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// lostCommitHarness is h with the CLI's database connection through a
// fault-injecting proxy, armed to lose the reply to the COMMIT of the
// statement containing pattern: the server commits, the CLI never hears.
func lostCommitHarness(t *testing.T, h *harness, pattern string) (*harness, *ffharness.Proxy) {
	t.Helper()
	u, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	p := ffharness.StartProxy(t, u.Host)
	p.DropCommitReply(pattern)
	via := *h
	via.url = p.URL(h.url)
	return &via, p
}

// lostCommitRun runs ffctl through p and, once p has swallowed the COMMIT's
// reply and committed reports the write visible (read on another
// connection), breaks the connection (as a failing network would), so the
// CLI sees its COMMIT fail without an answer although the server applied it.
func lostCommitRun(t *testing.T, via *harness, p *ffharness.Proxy, committed func() bool, args ...string) result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- via.ff(args...) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return r
		case <-tick.C:
			if p.Fired() && committed() {
				p.ResetConns()
			}
		case <-deadline:
			t.Fatalf("ffctl %v did not return within 30s", args)
		}
	}
}

// TestARequeueWhoseCommitReplyIsLostIsNotReportedAsNothingRequeued: the
// requeue committed but its reply was lost. The CLI must not say "nothing
// was requeued" (an operator would requeue again): it says the outcome is
// unknown and how to check. On d85caa6 it printed "commit: … (nothing was
// requeued)" while the task was PENDING.
func TestARequeueWhoseCommitReplyIsLostIsNotReportedAsNothingRequeued(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, dead := h.deadRun()
	via, p := lostCommitHarness(t, h, "WITH RECURSIVE given AS")
	r := lostCommitRun(t, via, p, func() bool { return h.state(dead) != core.TaskDead }, "dead", "requeue", dead.String(), "--reason", "lost reply")
	if !p.Fired() {
		t.Fatalf("the proxy never matched the requeue statement: %s", r)
	}
	if r.code != 1 || strings.Contains(r.stderr, "nothing was requeued") || !strings.Contains(r.stderr, "may have been requeued") || !strings.Contains(r.stderr, "ffctl dead list") {
		t.Fatalf("want exit 1 saying the requeue may have happened and how to check, got %s", r)
	}
	if st := h.state(dead); st == core.TaskDead {
		t.Fatalf("the task is still DEAD: the lost reply was not a committed requeue (state %s)", st)
	}
}

// TestATriggerWhoseCommitReplyIsLostSaysTheRunMayExist: the same for run
// trigger — a script that retries on "commit: conn closed" would create a
// second run; the error says the run may exist and how to retry safely.
func TestATriggerWhoseCommitReplyIsLostSaysTheRunMayExist(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	via, p := lostCommitHarness(t, h, "INSERT INTO workflow_runs")
	r := lostCommitRun(t, via, p, func() bool { return len(h.runsOf("twostep")) == 1 }, "run", "trigger", "twostep")
	if !p.Fired() {
		t.Fatalf("the proxy never matched the trigger's insert: %s", r)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "may have been created") || !strings.Contains(r.stderr, "--idempotency-key") {
		t.Fatalf("want exit 1 saying the run may have been created, got %s", r)
	}
	if runs := h.runsOf("twostep"); len(runs) != 1 {
		t.Fatalf("runs of twostep: %d, want 1: the trigger committed", len(runs))
	}
}

// runsOf lists the runs of workflow.
func (h *harness) runsOf(workflow string) []store.Run {
	h.t.Helper()
	runs, err := h.s.ListRuns(h.ctx, store.RunFilter{Workflow: workflow})
	if err != nil {
		h.t.Fatal(err)
	}
	return runs
}
