package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// approvalWorkflow waits for order.approved with the run's order_id as
// its key, then ships.
const approvalWorkflow = `
name: approval
tasks:
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 7d, on_timeout: skip}
  - {name: ship, handler: noop, depends_on: [approve]}
`

// waitingRun applies approvalWorkflow, triggers a run of order_id and
// makes the scheduler's pass that starts its wait.
func (h *harness) waitingRun(orderID string) (run, approve string) {
	h.t.Helper()
	h.apply(approvalWorkflow)
	id := storetest.Trigger(h.t, h.s, "approval", `{"order_id": `+orderID+`}`)
	storetest.Advance(h.t, h.s)
	task := h.taskID(id, "approve")
	if st := h.state(task); st != core.TaskRunning {
		h.t.Fatalf("approve is %s after the pass, want RUNNING (waiting)", st)
	}
	return id.String(), task.String()
}

// task reads the task run id with its result.
func (h *harness) task(id string) store.TaskDetail {
	h.t.Helper()
	d, err := h.s.GetTask(h.ctx, uuid.MustParse(id))
	if err != nil {
		h.t.Fatalf("get task %s: %v", id, err)
	}
	return d
}

// count runs a one-integer query.
func (h *harness) count(q string) int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRowContext(h.ctx, q).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestEventSendBadInputIsRefusedAndStoresNothing: each bad name, key,
// id, payload or lookback, and each usage error, exits 2 with exactly its
// message on standard error, nothing on standard output, and no row of
// any table changed (no event stored, the wait still RUNNING).
func TestEventSendBadInputIsRefusedAndStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, approve := h.waitingRun("42")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	array := file("array.json", `[1, 2]`)
	missing := filepath.Join(dir, "none.json")
	send := func(args ...string) []string {
		return append([]string{"event", "send", "order.approved", "--key", "42"}, args...)
	}
	cases := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string // the whole of standard error
	}{
		{"no name", []string{"event", "send"}, "", 2, "event send takes one event name (got 0 arguments)"},
		{"two names", []string{"event", "send", "a", "b"}, "", 2, "event send takes one event name (got 2 arguments)"},
		{"a bad name", []string{"event", "send", "Order Approved"}, "", 2, `invalid event: event name "Order Approved" must match [a-z0-9][a-z0-9._-]*`},
		{"a name too long", []string{"event", "send", strings.Repeat("e", core.MaxNameLength+1)}, "", 2, `invalid event: event name "` + strings.Repeat("e", core.MaxNameLength+1) + `" is longer than 128 characters`},
		{"a NUL in the key", []string{"event", "send", "order.approved", "--key", "4\x002"}, "", 2, "--key: invalid event: the key must be UTF-8 without NUL"},
		{"a key too long", []string{"event", "send", "order.approved", "--key", strings.Repeat("k", 513)}, "", 2, "--key: invalid event: the key is 513 bytes, longer than the limit of 512"},
		{"an empty id", send("--id", ""), "", 2, "--id: invalid event: the id is empty (leave it out for a made-up one)"},
		{"a NUL in the id", send("--id", "a\x00"), "", 2, "--id: invalid event: the id must be UTF-8 without NUL"},
		{"an id too long", send("--id", strings.Repeat("i", 257)), "", 2, "--id: invalid event: the id is 257 bytes, longer than the limit of 256"},
		{"a payload not JSON", send("--payload", `{"by": ana}`), "", 2, "--payload: not JSON: invalid character 'a' looking for beginning of value"},
		{"a payload cut short", send("--payload", `{"by":`), "", 2, "--payload: not JSON: unexpected EOF"},
		{"a payload not an object", send("--payload", `"approved"`), "", 2, "--payload: want a JSON object, got a string"},
		{"a payload with NUL", send("--payload", `{"by": "a\u0000"}`), "", 2, `--payload: $.by contains a NUL character (\u0000), which PostgreSQL cannot store`},
		{"a payload with a key twice", send("--payload", `{"by": 1, "by": 2}`), "", 2, "--payload: key $.by appears twice in one object (PostgreSQL would keep only the last)"},
		{"a payload file of an array", send("--payload", "@"+array), "", 2, "--payload @" + array + ": want a JSON object, got an array"},
		{"a payload file missing", send("--payload", "@"+missing), "", 2, "cannot read " + missing + ": no such file or directory"},
		{"a payload on stdin not JSON", send("--payload", "-"), "by=ana", 2, "--payload -: not JSON: invalid character 'b' looking for beginning of value"},
		{"an unparseable lookback", send("--event-lookback", "soon"), "", 2, `--event-lookback: unparseable duration "soon" (use Go syntax such as "30s", "5m" or "24h", or days: "7d", "1d12h")`},
		{"a zero lookback", send("--event-lookback", "0s"), "", 2, "--event-lookback 0s: must be positive and at most 366d, such as 24h or 7d"},
		{"a negative lookback", send("--event-lookback", "-1h"), "", 2, "--event-lookback -1h: must be positive and at most 366d, such as 24h or 7d"},
		{"a lookback past a year", send("--event-lookback", "367d"), "", 2, "--event-lookback 367d: must be positive and at most 366d, such as 24h or 7d"},
		{"an unknown flag", send("--lookback", "1h"), "", 2, "event send: flag provided but not defined: --lookback (see ffctl event send --help)"},
		{"a bad output format", send("-o", "yaml"), "", 2, `-o "yaml": want table or json`},
		{"list: a bad name", []string{"event", "list", "--name", "A"}, "", 2, `--name: invalid event: event name "A" must match [a-z0-9][a-z0-9._-]*`},
		{"list: a NUL key", []string{"event", "list", "--key", "\x00"}, "", 2, "--key: invalid event: the key must be UTF-8 without NUL"},
		{"list: a limit too large", []string{"event", "list", "--limit", "1001"}, "", 2, "--limit 1001: must be between 1 and 1000"},
		{"list: an argument", []string{"event", "list", "order.approved"}, "", 2, `event list takes no arguments (got "order.approved"; filter with --name and --key)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ffIn(tc.stdin, tc.args...)
			if r.code != tc.code || r.stderr != "ffctl: "+tc.want+"\n" || r.stdout != "" {
				t.Fatalf("%s\nwant exit %d, stderr %q and no output", r, tc.code, "ffctl: "+tc.want+"\n")
			}
			h.assertUnchanged(before)
		})
	}
	if st := h.state(uuid.MustParse(approve)); st != core.TaskRunning {
		t.Fatalf("approve is %s after the refusals, want RUNNING", st)
	}
}

// TestEventSendCompletesTheWaitAndSaysSoOnceAgain: `event send` with the
// run's key completes its wait (SUCCEEDED with the payload, read from
// standard input) and prints the event and the task run; the same --id
// again exits 0 saying it was received already and sent nothing, with -o
// json too; `event list` shows it with its delivery, as a table and
// whole in -o json.
func TestEventSendCompletesTheWaitAndSaysSoOnceAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	run, approve := h.waitingRun(`"A-7"`)
	r := h.ffIn(`{"by": "ana"}`, "event", "send", "order.approved", "--key", "A-7", "--payload", "-", "--id", "approval-7")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("event send: %s", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `event approval-7 (order.approved, key "A-7") sent: completed 1 waiting task run; kept until `) ||
		!strings.HasPrefix(lines[1], "RUN ID") || strings.Join(strings.Fields(lines[2]), " ") != run+" approval approve "+approve {
		t.Fatalf("event send printed:\n%s", r.stdout)
	}
	task := h.task(approve)
	if task.State != core.TaskSucceeded || string(task.Result) != `{"by": "ana"}` {
		t.Fatalf("approve: %s with result %s, want SUCCEEDED with the payload", task.State, task.Result)
	}

	r = h.must("event", "send", "order.approved", "--key", "A-7", "--payload", `{"by": "bob"}`, "--id", "approval-7")
	if !strings.Contains(r.stdout, `event approval-7 (order.approved, key "A-7"): already received at `) ||
		!strings.Contains(r.stdout, ", delivered once: nothing sent again\nit completed 1 task run then:\n") || !strings.Contains(r.stdout, approve) {
		t.Fatalf("the same id again:\n%s", r)
	}
	res := decode[client.SendEventResult](t, h.must("event", "send", "other.name", "--id", "approval-7", "-o", "json").stdout)
	if !res.Duplicate || len(res.Completed) != 0 || res.Event.Name != "order.approved" || decode[map[string]string](t, string(res.Event.Payload))["by"] != "ana" || len(res.Event.Deliveries) != 1 {
		t.Fatalf("the same id again, -o json: %+v", res)
	}
	if n := h.count(`SELECT count(*) FROM events`); n != 1 {
		t.Fatalf("%d events stored, want 1: the duplicates stored nothing", n)
	}

	h.must("event", "send", "order.approved", "--key", "B-8", "--event-lookback", "7d")
	r = h.must("event", "list", "--name", "order.approved")
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	words := func(l string) string { f := strings.Fields(l); return f[2] + " " + strings.Join(f[len(f)-2:], " ") }
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || words(lines[1]) != "B-8 0 -" ||
		!strings.HasPrefix(lines[2], "approval-7") || words(lines[2]) != "A-7 1 "+run[:8]+"/approve" {
		t.Fatalf("event list:\n%s", r.stdout)
	}
	evs := decode[[]client.Event](t, h.must("event", "list", "--key", "A-7", "-o", "json").stdout)
	if len(evs) != 1 || evs[0].ID != "approval-7" || len(evs[0].Deliveries) != 1 || evs[0].Deliveries[0].TaskRunID.String() != approve || evs[0].Deliveries[0].Workflow != "approval" {
		t.Fatalf("event list --key A-7 -o json: %+v", evs)
	}
}

// TestEventOutputShowsNoRawControlCharacters: a key holding escape
// sequences, C1 controls and bidi overrides is shown escaped by event
// send and event list.
func TestEventOutputShowsNoRawControlCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := hostileText()
	for _, args := range [][]string{
		{"event", "send", "order.approved", "--key", key, "--id", "evil"},
		{"event", "send", "order.approved", "--key", key, "--id", "evil"},
		{"event", "list"},
	} {
		out := h.must(args...).stdout
		if raw := rawControls(out); len(raw) > 0 || !strings.Contains(out, `\x1b[2J`) && !strings.Contains(out, `\x1b`) {
			t.Errorf("%v: raw %U, or no placeholder:\n%q", args[:2], raw, out)
		}
	}
}
