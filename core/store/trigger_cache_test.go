package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
)

const (
	cachedV1 = "name: cached\ntasks:\n  - {name: a, handler: noop}\n"
	cachedV2 = "name: cached\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n"
	cachedV3 = "name: cached\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n  - {name: c, handler: noop}\n"
)

// openStore opens a second store on dbURL with opt, closed in t.Cleanup.
func openStore(t *testing.T, dbURL string, opt store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dbURL, opt)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestATriggerAfterAnApplyElsewhereUsesTheNewVersion: a Store caches the
// definitions it triggers; a version applied by another process (another
// Store) since must still be the one the next trigger of "the newest"
// uses — the trigger's statement finds its cached version superseded,
// inserts nothing, and the Store reloads — while an asked-for version
// stays that version (versions never change). Without the check the second
// trigger below creates a run of version 1.
func TestATriggerAfterAnApplyElsewhereUsesTheNewVersion(t *testing.T) {
	t.Parallel()
	for _, oneShot := range []bool{false, true} {
		t.Run(map[bool]string{false: "pooled", true: "one-shot"}[oneShot], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(cachedV1)
			trig := openStore(t, f.url, store.Options{MaxConns: 2, OneShot: oneShot})
			trigger := func(version int) store.Run {
				t.Helper()
				res, err := trig.Trigger(f.ctx, store.TriggerRequest{Workflow: "cached", Version: version, Actor: "test"})
				if err != nil {
					t.Fatalf("trigger version %d: %v", version, err)
				}
				return f.run(res.RunID)
			}
			many := func(version int) []store.Run {
				t.Helper()
				ids, err := trig.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "cached", Version: version, Params: []json.RawMessage{nil, json.RawMessage(`{"n":2}`)}, Actor: "test"})
				if err != nil || len(ids) != 2 {
					t.Fatalf("trigger many of version %d: %v %v", version, ids, err)
				}
				return []store.Run{f.run(ids[0]), f.run(ids[1])}
			}
			want := func(what string, r store.Run, version, tasks int) {
				t.Helper()
				if r.WorkflowVersion != version || r.TasksTotal != tasks || len(r.Tasks) != tasks {
					t.Fatalf("%s: run of version %d with %d tasks, want version %d with %d", what, r.WorkflowVersion, len(r.Tasks), version, tasks)
				}
			}
			want("first trigger", trigger(0), 1, 1) // caches version 1 as the newest
			f.apply(cachedV2)                       // another store: trig's cache does not hear of it
			want("trigger after an apply elsewhere", trigger(0), 2, 2)
			want("pinned version 1", trigger(1), 1, 1) // caches version 1 for good
			f.apply(cachedV3)
			for _, r := range many(0) {
				want("bulk trigger after an apply elsewhere", r, 3, 3)
			}
			want("pinned version 1 after another apply", trigger(1), 1, 1)
			for _, r := range many(2) {
				want("pinned bulk trigger", r, 2, 2)
			}
		})
	}
}

// TestATriggerWakesOnlyThePublishers: a trigger's roots are READY with
// their outbox rows, so its one notification is on OutboxChannel (the
// scheduler has nothing to do for it): the next notification after it is
// the cancel's, on TasksChannel.
func TestATriggerWakesOnlyThePublishers(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f := newFixture(t)
	f.apply(diamond)
	conn := listenAll(t, f.url, store.TasksChannel, store.OutboxChannel)
	run := f.trigger("diamond", "")
	if got, want := nextOn(t, conn), (notification{store.OutboxChannel, ""}); got != want {
		t.Fatalf("after the trigger: %+v; want %+v", got, want)
	}
	if _, err := f.s.CancelRun(f.ctx, run, "cli:test", "stop"); err != nil {
		t.Fatal(err)
	}
	if got, want := nextOn(t, conn), (notification{store.TasksChannel, run.String()}); got != want {
		t.Fatalf("after the cancel: %+v; want %+v (did the trigger wake the schedulers?)", got, want)
	}
}
