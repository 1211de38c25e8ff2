package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestAnUnknownTracesExporterIsAUsageError: `ffctl run trigger` and
// `ffctl daemon ROLE` with OTEL_TRACES_EXPORTER naming no exporter exit 2
// with a message naming the variable, the value and the accepted ones, and
// the trigger creates no run.
func TestAnUnknownTracesExporterIsAUsageError(t *testing.T) {
	t.Parallel()
	s, db, url := storetest.NewWithDB(t)
	storetest.Apply(t, s, "name: solo\ntasks:\n  - {name: only, handler: noop}\n")
	vars := map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}
	want := `ffctl: unknown traces exporter: OTEL_TRACES_EXPORTER="jaeger"; accepted values: none, console, otlp (or a comma-separated list of console and otlp)` + "\n"
	for _, args := range [][]string{{"run", "trigger", "solo"}, {"daemon", "worker", "--health-addr", ""}} {
		code, out, errOut := ttyRun(t, url, "", false, vars, args...)
		if code != 2 || out != "" || !strings.HasSuffix(errOut, want) {
			t.Fatalf("ffctl %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, out, errOut, want)
		}
	}
	var runs int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM workflow_runs`).Scan(&runs); err != nil || runs != 0 {
		t.Fatalf("runs after the refused trigger: %d, %v; want none", runs, err)
	}
}

// TestRunTriggerWithTheConsoleExporterWritesItsSpanAndStoresItsTrace:
// with OTEL_TRACES_EXPORTER=console the trigger prints the run's id alone
// on stdout (what scripts read: a span there broke `RUN=$(ffctl run
// trigger ...)`, found by a new user's trial) and its flowforge.trigger
// span (a JSON line) on stderr, and the run's root dispatch carries that
// span's traceparent; with tracing off it prints the id alone and the
// dispatch carries none.
func TestRunTriggerWithTheConsoleExporterWritesItsSpanAndStoresItsTrace(t *testing.T) {
	t.Parallel()
	s, db, url := storetest.NewWithDB(t)
	storetest.Apply(t, s, "name: solo\ntasks:\n  - {name: only, handler: noop}\n")
	for _, exporter := range []string{"console", "none"} {
		code, out, errOut := ttyRun(t, url, "", false, map[string]string{"OTEL_TRACES_EXPORTER": exporter}, "run", "trigger", "solo")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", exporter, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		runID, err := uuid.Parse(lines[0])
		if err != nil {
			t.Fatalf("%s: first line %q is not the run id", exporter, lines[0])
		}
		var payload string
		if err := db.QueryRowContext(t.Context(), `SELECT coalesce(o.payload->>'traceparent', '') FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`, runID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if exporter == "none" {
			if len(lines) != 1 || payload != "" {
				t.Fatalf("none: stdout %q, dispatch traceparent %q; want the id alone and none", out, payload)
			}
			continue
		}
		if len(lines) != 1 {
			t.Fatalf("console: stdout %q, want the run id alone", out)
		}
		var span struct {
			Name        string
			SpanContext struct{ TraceID, SpanID string }
		}
		spanLine := strings.TrimSpace(errOut)
		if err := json.Unmarshal([]byte(spanLine), &span); err != nil || span.Name != "flowforge.trigger" {
			t.Fatalf("console: stderr %q (%v), want the flowforge.trigger span", errOut, err)
		}
		if want := "00-" + span.SpanContext.TraceID + "-" + span.SpanContext.SpanID + "-01"; payload != want {
			t.Fatalf("console: dispatch traceparent %q, want the trigger span's %q", payload, want)
		}
	}
}
