package cli_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

func TestOutboxStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	empty := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout)
	for _, k := range []string{"pending", "oldest_pending_seconds", "published_last_minute", "failing", "quarantined"} {
		if v, ok := empty[k]; !ok || v != 0 {
			t.Fatalf("empty outbox: %s = %v (present %v)", k, v, ok)
		}
	}
	h.apply("name: fan\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n")
	h.trigger("fan")
	// Publish one of the two root dispatches, as the publisher would.
	b, err := h.s.LockOutbox(h.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkPublished(h.ctx, []int64{b.Rows[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	st := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout)
	if st["pending"] != 1 || st["published_last_minute"] != 1 || st["oldest_pending_seconds"] < 0 || st["failing"] != 0 || st["quarantined"] != 0 {
		t.Fatalf("outbox status: %v", st)
	}
	out := h.must("outbox", "status").stdout
	if !strings.Contains(out, "pending                 1\n") || !strings.Contains(out, "published last minute   1\n") || !strings.Contains(out, "quarantined             0\n") {
		t.Fatalf("outbox status table:\n%s", out)
	}
}

// quarantineOne triggers a one-task run and quarantines its dispatch, as a
// publisher would; it returns the row id.
func (h *harness) quarantineOne(workflow string) int64 {
	h.t.Helper()
	h.trigger(workflow)
	b, err := h.s.LockOutbox(h.ctx, 1)
	if err != nil {
		h.t.Fatal(err)
	}
	defer b.Rollback()
	id := b.Rows[0].ID
	if n, err := b.Quarantine(h.ctx, []int64{id}, "publisher", "message of 400 bytes is larger than the max message size of 300 bytes"); err != nil || n != 1 {
		h.t.Fatalf("quarantine: %d, %v", n, err)
	}
	if err := b.Commit(); err != nil {
		h.t.Fatal(err)
	}
	return id
}

func TestOutboxQuarantinedRetryAndDrop(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	first := h.quarantineOne("one")
	second := h.quarantineOne("one")

	if st := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout); st["quarantined"] != 2 || st["pending"] != 0 {
		t.Fatalf("status: %v", st)
	}
	rows := decode[[]store.QuarantinedRow](t, h.must("outbox", "quarantined", "-o", "json").stdout)
	if len(rows) != 2 || rows[0].ID != first || rows[1].ID != second || !strings.Contains(rows[0].Reason, "larger than the max message size") || rows[0].TaskState != "READY" {
		t.Fatalf("quarantined: %+v", rows)
	}
	table := h.must("outbox", "quarantined").stdout
	if !strings.Contains(table, "REASON") || !strings.Contains(table, strconv.FormatInt(first, 10)) || !strings.Contains(table, "larger than the max message size") {
		t.Fatalf("quarantined table:\n%s", table)
	}

	r := decode[map[string]any](t, h.must("outbox", "retry", strconv.FormatInt(first, 10), "--reason", "limit raised", "-o", "json").stdout)
	if r["retried"] != true {
		t.Fatalf("retry: %v", r)
	}
	if st := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout); st["quarantined"] != 1 || st["pending"] != 1 {
		t.Fatalf("status after retry: %v", st)
	}

	out := h.must("outbox", "drop", strconv.FormatInt(second, 10), "--reason", "cannot be sent").stdout
	if !strings.Contains(out, "dropped; task ") || !strings.Contains(out, "is DEAD") {
		t.Fatalf("drop: %s", out)
	}
	var taskState, actor, reason string
	if err := h.db.QueryRowContext(h.ctx, `SELECT t.state, e.actor, e.reason FROM outbox o JOIN task_runs t ON t.id = o.task_run_id JOIN task_events e ON e.task_run_id = t.id AND e.to_state = 'DEAD' WHERE o.id = $1`, second).Scan(&taskState, &actor, &reason); err != nil {
		t.Fatal(err)
	}
	if taskState != "DEAD" || !strings.HasPrefix(actor, "cli:") || !strings.Contains(actor, "@") || !strings.Contains(reason, "cannot be sent") {
		t.Fatalf("after drop: task %s, audit actor %q reason %q", taskState, actor, reason)
	}
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM outbox_events WHERE actor LIKE 'cli:%@%' AND ((outbox_id = $1 AND action = 'retry' AND reason = 'limit raised') OR (outbox_id = $2 AND action = 'drop' AND reason = 'cannot be sent'))`, first, second).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d cli audit rows, want 2", n)
	}
	if rows := decode[[]store.QuarantinedRow](t, h.must("outbox", "quarantined", "-o", "json").stdout); len(rows) != 0 {
		t.Fatalf("still quarantined: %+v", rows)
	}
}

// TestOutboxBadInputIsRefusedAndWritesNothing: every bad input to the
// outbox commands gets its exit code and a message naming the problem,
// and changes no row.
func TestOutboxBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	q := strconv.FormatInt(h.quarantineOne("one"), 10)
	h.trigger("one")
	var pending string
	if err := h.db.QueryRowContext(h.ctx, `SELECT id::text FROM outbox WHERE quarantined_at IS NULL`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("r", 1025)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"retry without id", []string{"outbox", "retry", "--reason", "x"}, 2, "needs exactly one outbox row id"},
		{"retry two ids", []string{"outbox", "retry", q, q, "--reason", "x"}, 2, "got 2 arguments"},
		{"retry malformed id", []string{"outbox", "retry", "abc", "--reason", "x"}, 2, `malformed outbox row id "abc"`},
		{"retry zero id", []string{"outbox", "retry", "0", "--reason", "x"}, 2, `malformed outbox row id "0"`},
		{"retry negative id", []string{"outbox", "retry", "--reason", "x", "--", "-4"}, 2, `malformed outbox row id "-4"`},
		{"retry id overflow", []string{"outbox", "retry", "99999999999999999999", "--reason", "x"}, 2, "malformed outbox row id"},
		{"retry without reason", []string{"outbox", "retry", q}, 2, "--reason is required: say why the row is retried"},
		{"retry blank reason", []string{"outbox", "retry", q, "--reason", "  "}, 2, "--reason is required"},
		{"retry long reason", []string{"outbox", "retry", q, "--reason", long}, 2, "longer than 1024 bytes"},
		{"retry NUL reason", []string{"outbox", "retry", q, "--reason", "a\x00b"}, 2, "NUL"},
		{"retry bad output", []string{"outbox", "retry", q, "--reason", "x", "-o", "yaml"}, 2, "yaml"},
		{"retry unknown id", []string{"outbox", "retry", "987654321", "--reason", "x"}, 1, "outbox row 987654321: not found"},
		{"retry pending row", []string{"outbox", "retry", pending, "--reason", "x"}, 1, "is not quarantined (it is pending)"},
		{"drop without id", []string{"outbox", "drop", "--reason", "x"}, 2, "needs exactly one outbox row id"},
		{"drop malformed id", []string{"outbox", "drop", "4x", "--reason", "x"}, 2, `malformed outbox row id "4x"`},
		{"drop without reason", []string{"outbox", "drop", q}, 2, "--reason is required: say why the row is dropped"},
		{"drop unknown id", []string{"outbox", "drop", "987654321", "--reason", "x"}, 1, "not found"},
		{"drop pending row", []string{"outbox", "drop", pending, "--reason", "x"}, 1, "is not quarantined (it is pending)"},
		{"quarantined with argument", []string{"outbox", "quarantined", "x"}, 2, "takes no arguments"},
		{"quarantined zero limit", []string{"outbox", "quarantined", "--limit", "0"}, 2, "--limit 0"},
		{"status with argument", []string{"outbox", "status", "x"}, 2, "takes no arguments"},
		{"handler name too long", nil, 2, "handler name is 129 bytes, longer than the limit of 128"},
	}
	count := func() int {
		var n int
		if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, events := h.snapshot(), count()
			var r result
			if c.args == nil {
				r = h.ffIn("name: w\ntasks:\n  - {name: a, handler: "+strings.Repeat("h", 129)+"}\n", "workflow", "apply", "-f", "-")
			} else {
				r = h.ff(c.args...)
			}
			expect(t, r, c.code, c.want)
			if r.stdout != "" {
				t.Fatalf("stdout not empty: %q", r.stdout)
			}
			h.assertUnchanged(before)
			if count() != events {
				t.Fatal("an audit row was written")
			}
		})
	}
}
