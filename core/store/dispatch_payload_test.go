package store_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// payloadRow is an outbox row with the task row it dispatches.
type payloadRow struct {
	ID       int64
	Payload  string
	Snapshot int64 // outbox.fencing_token_snapshot
	Task     payloadTask
	Token    int64 // the task row's fencing token now
	// Installation is the database's (store.Store.Installation).
	Installation uuid.UUID
}

// payloadTask is what a dispatch carries of its task row, and its state.
type payloadTask struct {
	ID, RunID     uuid.UUID
	Name, Handler string
	State         core.TaskState
}

// payloadRows returns the outbox rows with id > after, oldest first, with
// their task rows as they are now.
func (f *fixture) payloadRows(after int64) []payloadRow {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `
SELECT o.id, o.payload::text, o.fencing_token_snapshot, t.id, t.run_id, t.task_name, t.handler, t.state, t.fencing_token
  FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
 WHERE o.id > $1 ORDER BY o.id`, after)
	if err != nil {
		f.t.Fatalf("read outbox: %v", err)
	}
	defer rows.Close()
	in, err := f.s.Installation(f.ctx)
	if err != nil {
		f.t.Fatalf("installation: %v", err)
	}
	var out []payloadRow
	for rows.Next() {
		var r payloadRow
		var state string
		if err := rows.Scan(&r.ID, &r.Payload, &r.Snapshot, &r.Task.ID, &r.Task.RunID, &r.Task.Name, &r.Task.Handler, &state, &r.Token); err != nil {
			f.t.Fatalf("read outbox: %v", err)
		}
		r.Task.State = core.TaskState(state)
		r.Installation = in.ID
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatalf("read outbox: %v", err)
	}
	return out
}

// dispatchFields are the JSON names of core.Dispatch's fields.
func dispatchFields(t *testing.T) []string {
	t.Helper()
	var names []string
	typ := reflect.TypeFor[core.Dispatch]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("core.Dispatch.%s has no JSON name", typ.Field(i).Name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// checkPayload decodes r's payload with core.DecodeDispatch and insists it
// is its task row's dispatch at this binary's version, carrying token, with
// exactly the fields core.Dispatch knows.
func checkPayload(t *testing.T, r payloadRow, token int64) {
	t.Helper()
	d, err := core.DecodeDispatch([]byte(r.Payload))
	if err != nil {
		t.Fatalf("outbox row %d: %v\npayload %s", r.ID, err, r.Payload)
	}
	want := core.Dispatch{V: core.DispatchVersion, TaskRunID: r.Task.ID, RunID: r.Task.RunID, FencingToken: token, Task: r.Task.Name, Handler: r.Task.Handler,
		Installation: r.Installation}
	if d != want {
		t.Errorf("outbox row %d decodes to %+v, want %+v (its task row)", r.ID, d, want)
	}
	if r.Snapshot != d.FencingToken {
		t.Errorf("outbox row %d: fencing_token_snapshot %d, payload's token %d", r.ID, r.Snapshot, d.FencingToken)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.Payload), &raw); err != nil {
		t.Fatalf("outbox row %d: %v", r.ID, err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range raw {
			if !yield(k) {
				return
			}
		}
	})
	// The traceparent is written only for a traced run (these are not).
	fields := slices.DeleteFunc(dispatchFields(t), func(f string) bool { return f == "traceparent" && raw[f] == nil })
	if !slices.Equal(keys, fields) {
		t.Errorf("outbox row %d has the fields %v, core.Dispatch has %v", r.ID, keys, fields)
	}
}

const payloadsWorkflow = `
name: payloads
tasks:
  - {name: first, handler: echo}
  - {name: then, handler: noop, depends_on: [first]}
  - {name: flaky, handler: fail, retry: {max_attempts: 5}}
  - {name: lapsed, handler: sleep, retry: {max_attempts: 5}}
  - {name: doomed, handler: noop, retry: {max_attempts: 1}}
  - {name: buried, handler: echo, depends_on: [doomed]}
`

// TestEveryOutboxPayloadDecodesToItsTaskRow drives the store through every
// path that writes an outbox row — a trigger's root tasks, a promotion after
// a parent's finish, a retry falling due after a failed finish and after a
// reaped lease, a requeued DEAD task and the UPSTREAM_FAILED descendant it
// revives, a redispatch — and decodes each row's payload with
// core.DecodeDispatch: every field must be its task row's (the token the
// one it had when the row was written), at core.DispatchVersion, with no
// field core.Dispatch does not know. A path that writes no row fails too.
func TestEveryOutboxPayloadDecodesToItsTaskRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(payloadsWorkflow)
	run := f.trigger("payloads", "")
	id := func(name string) uuid.UUID { return f.taskID(run, name) }

	var seen int64
	written := 0
	// step runs do, then checks the rows it wrote: one for each task of
	// want, READY, with its current token.
	step := func(what string, do func(), want ...string) {
		t.Helper()
		do()
		rows := f.payloadRows(seen)
		var got []string
		for _, r := range rows {
			got = append(got, r.Task.Name)
			if r.Task.State != core.TaskReady {
				t.Errorf("%s: outbox row %d for task %s, which is %s", what, r.ID, r.Task.Name, r.Task.State)
			}
			checkPayload(t, r, r.Token)
			seen = r.ID
		}
		written += len(rows)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s wrote outbox rows for %v, want %v", what, got, want)
		}
	}

	step("trigger", func() {}, "first", "flaky", "lapsed", "doomed")
	step("promotion after a finish", func() {
		f.runTask(id("first"))
		f.advance()
	}, "then")
	step("retry due after a failed finish", func() {
		c := f.claim(id("flaky"), "w1", 30*time.Second)
		if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom"}); st != core.TaskRetrying {
			t.Fatalf("flaky is %s after a failure, want RETRYING", st)
		}
		f.waitRetryDue(id("flaky"))
		f.advance()
	}, "flaky")
	step("retry due after a reaped lease", func() {
		f.claim(id("lapsed"), "w1", time.Millisecond)
		f.waitLeaseExpired(id("lapsed"))
		if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
			t.Fatalf("reap: n=%d err=%v, want 1", n, err)
		}
		f.waitRetryDue(id("lapsed"))
		f.advance()
	}, "lapsed")
	step("requeue of a DEAD task", func() {
		c := f.claim(id("doomed"), "w1", 30*time.Second)
		if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true}); st != core.TaskDead {
			t.Fatalf("doomed is %s after a permanent failure, want DEAD", st)
		}
		f.wantState(id("buried"), core.TaskUpstreamFailed)
		if err := f.s.Requeue(f.ctx, id("doomed"), "operator", "try again"); err != nil {
			t.Fatalf("requeue: %v", err)
		}
		f.advance()
	}, "doomed")
	step("promotion of a revived descendant", func() {
		f.runTask(id("doomed"))
		f.advance()
	}, "buried")
	step("redispatch", func() {
		b, err := f.s.LockOutbox(f.ctx, 100)
		if err != nil {
			t.Fatalf("lock outbox: %v", err)
		}
		ids := make([]int64, len(b.Rows))
		for i, r := range b.Rows {
			ids[i] = r.ID
		}
		if err := b.MarkPublished(f.ctx, ids); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Redispatch(f.ctx, 0, 100, "redispatcher"); err != nil {
			t.Fatalf("redispatch: %v", err)
		}
	}, "then", "flaky", "lapsed", "buried")

	// Every row, also the ones whose task has moved on since: the token is
	// the one the row was written for.
	all := f.payloadRows(0)
	if len(all) != written {
		t.Fatalf("%d outbox rows in all, the steps wrote %d", len(all), written)
	}
	for _, r := range all {
		checkPayload(t, r, r.Snapshot)
	}
}
