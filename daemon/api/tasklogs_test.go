package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/api"
)

// TestATasksLogIsReadInPages: GET /v1/tasks/{id}/logs answers the task's
// state and its lines in order (any id prefix), after a cursor and of one
// attempt as asked; bad numbers are 400 naming them.
func TestATasksLogIsReadInPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask)
	run := f.trigger("one", `{}`)
	id := storetest.Task(t, f.s, run, "t").ID
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var lines []store.TaskLogLine
	for i, l := range []struct {
		attempt int
		stream  core.LogStream
	}{{1, core.LogStreamLog}, {1, core.LogStreamStdout}, {2, core.LogStreamStderr}} {
		lines = append(lines, store.TaskLogLine{TaskRunID: id, Attempt: l.attempt, Seq: i + 1, LoggedAt: at, Stream: l.stream, Line: string(l.stream)})
	}
	if _, err := f.s.InsertTaskLogs(f.ctx, lines); err != nil {
		t.Fatal(err)
	}
	base := "/v1/tasks/" + id.String()[:8] + "/logs"
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"log", "stdout", "stderr"}},
		{"?attempt=2", []string{"stderr"}},
		{"?after_attempt=1&after_seq=1", []string{"stdout", "stderr"}},
		{"?limit=1", []string{"log"}},
	} {
		a := f.do(call{method: "GET", path: base + c.query, role: auth.RoleViewer})
		var page client.TaskLogPage
		a.json(t, &page)
		var got []string
		for _, l := range page.Lines {
			got = append(got, l.Line)
		}
		if a.status != http.StatusOK || page.TaskRunID != id || page.State != core.TaskReady || len(got) != len(c.want) {
			t.Fatalf("%s: %d %s", c.query, a.status, a.body)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s: lines %q, want %q", c.query, got, c.want)
			}
		}
	}
	for _, c := range []struct{ query, want string }{
		{"?attempt=0", `attempt "0": want a whole number from 1`},
		{"?limit=1001", `limit "1001": want a whole number from 1 to 1000`},
		{"?after_seq=x", `after_seq "x": want a whole number from -2147483648`},
		{"?tail=3", `query parameter "tail": unknown (this route takes attempt, after_attempt, after_seq, limit)`},
	} {
		a := f.do(call{method: "GET", path: base + c.query, role: auth.RoleViewer, invalid: true})
		if code, msg := a.errorOf(t); a.status != http.StatusBadRequest || code != api.CodeInvalidInput || msg != c.want {
			t.Errorf("%s: %d %s %q, want 400 %q", c.query, a.status, code, msg, c.want)
		}
	}
	a := f.do(call{method: "GET", path: "/v1/tasks/" + run.String() + "/logs", role: auth.RoleViewer})
	if code, _ := a.errorOf(t); a.status != http.StatusBadRequest || code != api.CodeInvalidInput {
		t.Fatalf("a run id: %d %s", a.status, a.body)
	}
}
