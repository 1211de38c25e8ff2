package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// consoleTracing is the environment of a process that writes its spans
// to its standard output (the console exporter).
var consoleTracing = []string{"OTEL_TRACES_EXPORTER=console"}

// zeroSpanID is the parent span id of a root span in the console output.
const zeroSpanID = "0000000000000000"

// traceSpan is what the tests read of a span the console exporter wrote.
type traceSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Resource []struct {
		Key   string
		Value struct{ Value any }
	}
	service string // the resource's service.name
}

// attr returns the span's attribute key as text ("" when absent).
func (s traceSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// spansOf returns the spans among the lines of a process's output (its
// logs are JSON lines too: a span is the object with a span context).
func spansOf(t *testing.T, output string) []traceSpan {
	t.Helper()
	var spans []traceSpan
	for _, line := range strings.Split(output, "\n") {
		if !strings.HasPrefix(line, `{"Name":`) {
			continue
		}
		var s traceSpan
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("a span line that does not parse: %v\n%s", err, line)
		}
		for _, r := range s.Resource {
			if r.Key == "service.name" {
				s.service = fmt.Sprint(r.Value.Value)
			}
		}
		spans = append(spans, s)
	}
	return spans
}

// tracedTrigger runs `ffctl run trigger workflow` with the console
// exporter and returns the run's id (stdout, alone) and the spans it
// wrote (on stderr: a command's stdout is what scripts read).
func tracedTrigger(t *testing.T, s *harness.Stack, workflow string) (string, []traceSpan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bin, "run", "trigger", workflow)
	cmd.Env = append(append(os.Environ(), s.Env()...), consoleTracing...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("ffctl run trigger %s: %v\n%s", workflow, err, errOut.String())
	}
	id := strings.TrimSpace(out.String())
	if strings.Contains(id, "\n") {
		t.Fatalf("ffctl run trigger %s printed more than the run id on stdout: %q", workflow, out.String())
	}
	return id, spansOf(t, errOut.String())
}

// stopAndCollect stops each process with SIGTERM (its provider flushes
// its spans as it exits) and returns the spans they all wrote.
func stopAndCollect(t *testing.T, procs ...*harness.Process) []traceSpan {
	t.Helper()
	var spans []traceSpan
	for _, p := range procs {
		if p.Exited() {
			continue
		}
		_ = p.Signal(syscall.SIGTERM)
		if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
			t.Fatalf("%s: exit %d, %v", p.Name, code, err)
		}
	}
	for _, p := range procs {
		spans = append(spans, spansOf(t, p.Logs())...)
	}
	return spans
}

// checkOneConnectedTrace fails the test unless every span of the run is
// of one trace whose root is the trigger's span (no parent) and every
// other span's parent is among spans. It returns the run's spans.
func checkOneConnectedTrace(t *testing.T, runID string, spans []traceSpan) []traceSpan {
	t.Helper()
	var run []traceSpan
	byID := map[string]traceSpan{}
	for _, s := range spans {
		if s.attr("flowforge.run_id") == runID {
			run = append(run, s)
			byID[s.SpanContext.SpanID] = s
		}
	}
	if len(run) == 0 {
		t.Fatalf("no span of run %s among %d spans", runID, len(spans))
	}
	trace := run[0].SpanContext.TraceID
	roots := 0
	for _, s := range run {
		if s.SpanContext.TraceID != trace {
			t.Errorf("%s (%s) is of trace %s, want the run's one trace %s", s.Name, s.service, s.SpanContext.TraceID, trace)
		}
		if s.Parent.SpanID == zeroSpanID {
			roots++
			if s.Name != "flowforge.trigger" {
				t.Errorf("root span %s (%s), want only flowforge.trigger without a parent", s.Name, s.service)
			}
			continue
		}
		if _, ok := byID[s.Parent.SpanID]; !ok {
			t.Errorf("%s (%s, task %s attempt %s): parent %s is not among the collected spans", s.Name, s.service, s.attr("flowforge.task"), s.attr("flowforge.attempt"), s.Parent.SpanID)
		}
	}
	if roots != 1 {
		t.Errorf("%d root spans, want 1 (the trigger)", roots)
	}
	return run
}

// countSpans counts the run's spans named name of task (any task when
// "") at attempt (any when ""), checking each one's attributes.
func countSpans(t *testing.T, spans []traceSpan, name, task, attempt string) int {
	t.Helper()
	n := 0
	for _, s := range spans {
		if s.Name != name || (task != "" && s.attr("flowforge.task") != task) || (attempt != "" && s.attr("flowforge.attempt") != attempt) {
			continue
		}
		n++
		for _, k := range []string{"flowforge.run_id", "flowforge.task_run_id", "flowforge.task"} {
			if s.attr(k) == "" {
				t.Errorf("%s of %s: no %s attribute", name, task, k)
			}
		}
	}
	return n
}

// renderTrace draws the run's spans as a tree, children in start order,
// with each span's process, task, attempt and duration: the text
// rendering docs/operating.md shows.
func renderTrace(spans []traceSpan) string {
	children := map[string][]traceSpan{}
	for _, s := range spans {
		children[s.Parent.SpanID] = append(children[s.Parent.SpanID], s)
	}
	for _, c := range children {
		sort.Slice(c, func(i, j int) bool { return c[i].StartTime.Before(c[j].StartTime) })
	}
	var b strings.Builder
	var walk func(parent string, depth int, t0 time.Time)
	walk = func(parent string, depth int, t0 time.Time) {
		for _, s := range children[parent] {
			if t0.IsZero() {
				t0 = s.StartTime
			}
			what := s.attr("flowforge.task")
			if a := s.attr("flowforge.attempt"); a != "" {
				what += " #" + a
			}
			fmt.Fprintf(&b, "%s%-*s %-20s %-9s %-9s +%-7s %s\n", strings.Repeat("  ", depth), 20-2*depth, s.Name, s.service, what,
				s.attr("flowforge.state"), s.StartTime.Sub(t0).Round(time.Millisecond), s.EndTime.Sub(s.StartTime).Round(100*time.Microsecond))
			walk(s.SpanContext.SpanID, depth+1, t0)
		}
	}
	walk(zeroSpanID, 0, time.Time{})
	return b.String()
}

// TestARunIsOneTraceAcrossEveryProcessAndARetry: with the console
// exporter in the trigger and in separate scheduler, publisher and worker
// processes, a run of a two-task workflow whose first task fails once is
// one trace: the trigger's span is its only root, every other span's
// parent was written by some process, and it holds the publish, claim,
// handler and finish of each attempt (the retry's second attempt
// included, promoted by the scheduler) with their attributes.
func TestARunIsOneTraceAcrossEveryProcessAndARetry(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	sched := s.DaemonEnv(t, "scheduler", "scheduler", consoleTracing, "--sweep-interval", "200ms")
	pub := s.DaemonEnv(t, "publisher", "publisher", consoleTracing)
	work := s.DaemonEnv(t, "worker", "worker", consoleTracing)
	s.Apply(t, `
name: traced
tasks:
  - name: flaky
    handler: fail
    params: {times: 1}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 200ms}
  - {name: after, handler: noop, depends_on: [flaky]}
`)
	runID, triggerSpans := tracedTrigger(t, s, "traced")
	if r := s.WaitRunTerminal(t, runID, 60*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("run %s: %s, want SUCCEEDED", runID, r.State)
	}
	spans := append(triggerSpans, stopAndCollect(t, sched, pub, work)...)
	run := checkOneConnectedTrace(t, runID, spans)
	for _, c := range []struct {
		name, task, attempt string
		min, max            int
	}{
		{"flowforge.trigger", "", "", 1, 1},
		{"flowforge.promote", "flaky", "2", 1, 1},
		{"flowforge.publish", "flaky", "", 2, 99}, // a redispatch may publish again
		{"flowforge.publish", "after", "", 1, 99},
		{"flowforge.claim", "flaky", "1", 1, 1},
		{"flowforge.handler", "flaky", "1", 1, 1},
		{"flowforge.finish", "flaky", "1", 1, 1},
		{"flowforge.claim", "flaky", "2", 1, 1},
		{"flowforge.handler", "flaky", "2", 1, 1},
		{"flowforge.finish", "flaky", "2", 1, 1},
		{"flowforge.claim", "after", "1", 1, 1},
		{"flowforge.handler", "after", "1", 1, 1},
		{"flowforge.finish", "after", "1", 1, 1},
	} {
		if c.name == "flowforge.trigger" {
			if n := len(triggerSpans); n != 1 || triggerSpans[0].Name != c.name || triggerSpans[0].attr("flowforge.workflow") != "traced" {
				t.Errorf("the trigger wrote %d spans (%v), want one flowforge.trigger of workflow traced", n, triggerSpans)
			}
			continue
		}
		if n := countSpans(t, run, c.name, c.task, c.attempt); n < c.min || n > c.max {
			t.Errorf("%d %s spans of %s attempt %q, want %d to %d", n, c.name, c.task, c.attempt, c.min, c.max)
		}
	}
	services := map[string]string{"flowforge.trigger": "ffctl", "flowforge.promote": "flowforge-scheduler",
		"flowforge.publish": "flowforge-publisher", "flowforge.claim": "flowforge-worker"}
	for _, sp := range run {
		if want, ok := services[sp.Name]; ok && sp.service != want {
			t.Errorf("%s written by %q, want %q", sp.Name, sp.service, want)
		}
		if sp.Name == "flowforge.finish" {
			want := "SUCCEEDED"
			if sp.attr("flowforge.task") == "flaky" && sp.attr("flowforge.attempt") == "1" {
				want = "RETRYING"
			}
			if got := sp.attr("flowforge.state"); got != want {
				t.Errorf("finish of %s #%s: state %q, want %q", sp.attr("flowforge.task"), sp.attr("flowforge.attempt"), got, want)
			}
		}
	}
	t.Logf("the run's trace:\n%s", renderTrace(run))
}

// TestAReapedTaskRunsAgainInTheSameTrace: a worker SIGKILLed mid-task
// loses its own spans (never flushed), but the task the scheduler reaps
// and makes READY again is promoted, published, claimed, run and finished
// by another worker as spans of the run's one trace.
func TestAReapedTaskRunsAgainInTheSameTrace(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	sched := s.DaemonEnv(t, "scheduler", "scheduler", consoleTracing, "--sweep-interval", "200ms")
	pub := s.DaemonEnv(t, "publisher", "publisher", consoleTracing)
	victim := s.DaemonEnv(t, "worker-victim", "worker", consoleTracing, "--lease", "1s", "--id", "victim")
	s.Apply(t, `
name: traced-reap
tasks:
  - name: slow
    handler: sleep
    params: {duration: 2s}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
	runID, triggerSpans := tracedTrigger(t, s, "traced-reap")
	crashWaitTask(t, db, runID, "slow", 30*time.Second, "RUNNING on the victim", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "victim"
	})
	victim.Kill()
	rescuer := s.DaemonEnv(t, "worker-rescuer", "worker", consoleTracing, "--id", "rescuer")
	if r := s.WaitRunTerminal(t, runID, 60*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("run %s: %s, want SUCCEEDED", runID, r.State)
	}
	spans := append(triggerSpans, stopAndCollect(t, sched, pub, rescuer)...)
	run := checkOneConnectedTrace(t, runID, spans)
	for _, c := range []struct{ name, attempt string }{
		{"flowforge.promote", "2"}, {"flowforge.claim", "2"}, {"flowforge.handler", "2"}, {"flowforge.finish", "2"},
	} {
		if n := countSpans(t, run, c.name, "slow", c.attempt); n != 1 {
			t.Errorf("%d %s spans of attempt %s, want 1", n, c.name, c.attempt)
		}
	}
	if n := countSpans(t, run, "flowforge.claim", "slow", "1"); n != 0 {
		t.Errorf("%d claim spans of the killed attempt, want none (its worker was killed before it flushed)", n)
	}
	t.Logf("the run's trace:\n%s", renderTrace(run))
}
