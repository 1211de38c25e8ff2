package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// goodV1 is a version with every setting a version holds; badV2 replaces
// it with a typo'd handler and other settings.
const (
	goodV1 = `
name: billing
fail_fast: true
tasks:
  - name: charge
    handler: sleep
    params: {duration: 1ms}
    retry: {max_attempts: 7, initial_backoff: 2s, max_backoff: 30s}
    timeout: 45s
    idempotency_key: "charge-{{ .Workflow }}"
    idempotency_ttl: 20h
  - {name: mail, handler: noop, depends_on: [charge]}
`
	badV2 = `
name: billing
tasks:
  - {name: charge, handler: slep, params: {duration: 1ms}}
  - {name: mail, handler: noop, depends_on: [charge]}
`
)

// TestRollbackMakesAnOldDefinitionTheNewestAgainAudited: a rollback to
// version 1 stores version 3 whose definition is version 1's (equal
// jsonb: tasks, params, retry, timeout, idempotency settings, fail_fast),
// audits it (who, why, from 2, to 1, when), and the next trigger makes a
// run of version 3 with version 1's settings; an apply of version 1's file
// is then a no-op.
func TestRollbackMakesAnOldDefinitionTheNewestAgainAudited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(goodV1)
	f.apply(badV2)
	before := time.Now()
	wf, ev, err := f.s.RollbackWorkflow(f.ctx, "billing", 1, "cli:alice@h", "v2 has a typo")
	if err != nil {
		t.Fatal(err)
	}
	if wf.Name != "billing" || wf.Version != 3 || len(wf.Definition.Tasks) != 2 || !wf.Definition.FailFast {
		t.Fatalf("rollback stored %+v", wf)
	}
	if n := f.count(`SELECT count(*) FROM workflows a JOIN workflows b ON a.name = b.name AND a.definition = b.definition WHERE a.name = 'billing' AND a.version = 1 AND b.version = 3`); n != 1 {
		t.Fatalf("version 3's definition is not version 1's")
	}
	want := store.WorkflowEvent{ID: ev.ID, Workflow: "billing", At: ev.At, Action: "rollback", Version: 3, FromVersion: 2, ToVersion: 1, Actor: "cli:alice@h", Reason: "v2 has a typo"}
	if ev != want || ev.At.Before(before.Add(-time.Minute)) || ev.At.After(time.Now().Add(time.Minute)) {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
	evs, err := f.s.WorkflowEvents(f.ctx, "billing")
	if err != nil || len(evs) != 1 || evs[0] != ev {
		t.Fatalf("WorkflowEvents = %+v, %v; want [%+v]", evs, err, ev)
	}
	if evs, err := f.s.WorkflowEvents(f.ctx, "nobody"); err != nil || len(evs) != 0 {
		t.Fatalf("WorkflowEvents of an unknown workflow = %+v, %v", evs, err)
	}

	run := f.run(f.trigger("billing", ""))
	if run.WorkflowVersion != 3 {
		t.Fatalf("a trigger after the rollback made a run of version %d, want 3", run.WorkflowVersion)
	}
	charge := f.task(f.taskID(run.ID, "charge"))
	if charge.Handler != "sleep" || charge.MaxAttempts != 7 || charge.IdempotencyKey == nil || *charge.IdempotencyKey != "charge-billing" {
		t.Fatalf("the run's charge task: handler %s, %d attempts, key %v; want version 1's", charge.Handler, charge.MaxAttempts, charge.IdempotencyKey)
	}
	if n := f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1 AND task_name = 'charge' AND initial_backoff_ms = 2000 AND max_backoff_ms = 30000 AND timeout_ms = 45000`, run.ID); n != 1 {
		t.Fatal("the run's charge task lacks version 1's backoffs and timeout")
	}
	if again := f.apply(goodV1); again.Version != 3 {
		t.Fatalf("re-applying version 1's file after the rollback stored version %d, want 3 (unchanged)", again.Version)
	}
}

// TestRollbackRefusesWhatItCannotDo: an unknown workflow or version
// (ErrNotFound), the newest version or one whose definition is the
// newest's (ErrNothingToRollBack), a blank reason (core.ErrBadReason):
// each refused, and nothing written.
func TestRollbackRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(goodV1)
	f.apply(badV2)
	if _, _, err := f.s.RollbackWorkflow(f.ctx, "billing", 1, "a", "fix"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		workflow string
		to       int
		reason   string
		want     error
		text     string
	}{
		{"unknown workflow", "nobody", 1, "r", store.ErrNotFound, `workflow "nobody": not found`},
		{"version 0", "billing", 0, "r", store.ErrNotFound, `it has no version 0 (its versions are 1 to 3)`},
		{"negative version", "billing", -2, "r", store.ErrNotFound, `it has no version -2`},
		{"beyond the newest", "billing", 4, "r", store.ErrNotFound, `it has no version 4 (its versions are 1 to 3)`},
		{"the newest", "billing", 3, "r", store.ErrNothingToRollBack, `version 3 is already the newest`},
		{"the newest's definition", "billing", 1, "r", store.ErrNothingToRollBack, `version 1's definition is already the newest's (version 3)`},
		{"blank reason", "billing", 2, "  ", core.ErrBadReason, ""},
	}
	versions := f.count(`SELECT count(*) FROM workflows`)
	for _, c := range cases {
		_, _, err := f.s.RollbackWorkflow(f.ctx, c.workflow, c.to, "a", c.reason)
		if !errors.Is(err, c.want) || (c.text != "" && !strings.Contains(err.Error(), c.text)) {
			t.Errorf("%s: err %v, want %v containing %q", c.name, err, c.want, c.text)
		}
	}
	if n := f.count(`SELECT count(*) FROM workflows`); n != versions {
		t.Errorf("%d versions after the refusals, want %d", n, versions)
	}
	if n := f.count(`SELECT count(*) FROM workflow_events`); n != 1 {
		t.Errorf("%d events after the refusals, want 1", n)
	}
}

// TestARollbackRacingAnApplyTakesTheNextNumber: with the workflow's
// version lock held from outside, a rollback and an apply of the same
// workflow both wait on it (forced: the test polls pg_locks until both
// do); released, both commit, with consecutive numbers, and the audit
// names the number the rollback took. Without the lock in the rollback it
// would not wait (the poll times out), and if both read the newest before
// either inserted, one would fail on workflows' (name, version) key.
func TestARollbackRacingAnApplyTakesTheNextNumber(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	name := fmt.Sprintf("race-%d", time.Now().UnixNano())
	src := func(handler string) string {
		return "name: " + name + "\ntasks:\n  - {name: a, handler: " + handler + "}\n"
	}
	f.apply(src("noop"))
	f.apply(src("sleep"))

	holder, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback() })
	if _, err := holder.ExecContext(f.ctx, `SELECT pg_advisory_xact_lock(hashtext('flowforge.workflow.' || $1))`, name); err != nil {
		t.Fatal(err)
	}
	var (
		wg              sync.WaitGroup
		rolled, applied store.Workflow
		ev              store.WorkflowEvent
		rbErr, apErr    error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		rolled, ev, rbErr = f.s.RollbackWorkflow(f.ctx, name, 1, "a", "race")
	}()
	go func() {
		defer wg.Done()
		def, err := core.ParseDefinition([]byte(src("http")))
		if err != nil {
			apErr = err
			return
		}
		applied, _, apErr = f.s.ApplyWorkflow(f.ctx, def)
	}()
	waitForLockWaiters(t, f, name, 2)
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if rbErr != nil || apErr != nil {
		t.Fatalf("rollback: %v; apply: %v", rbErr, apErr)
	}
	if got := map[int]bool{rolled.Version: true, applied.Version: true}; !got[3] || !got[4] {
		t.Fatalf("rollback took version %d, apply %d; want 3 and 4", rolled.Version, applied.Version)
	}
	if ev.Version != rolled.Version || ev.FromVersion != rolled.Version-1 {
		t.Fatalf("event %+v for rollback version %d", ev, rolled.Version)
	}
	if n := f.count(`SELECT count(*) FROM workflows WHERE name = $1`, name); n != 4 {
		t.Fatalf("%d versions, want 4", n)
	}
}

// waitForLockWaiters polls pg_locks until n backends wait for the version
// lock of workflow name, failing the test after 10 s.
func waitForLockWaiters(t *testing.T, f *fixture, name string, n int) {
	t.Helper()
	const q = `
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND objid = ((hashtext('flowforge.workflow.' || $1)::bigint) & 4294967295)::oid`
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.count(q, name)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends wait for the version lock of %s, want %d", got, name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRollbackOnAnOlderSchemaSaysToMigrate: on a database at schema 10
// (no workflow_events) WorkflowEvents reads none and a rollback refuses
// with ErrSchemaOutdated, writing no version.
func TestRollbackOnAnOlderSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewPrivateDatabase(t)
	db := storetest.MigrateTo(t, dbURL, 10)
	ctx := t.Context()
	s, err := store.Open(ctx, dbURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, src := range []string{goodV1, badV2} {
		def, err := core.ParseDefinition([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
	}
	if evs, err := s.WorkflowEvents(ctx, "billing"); err != nil || evs != nil {
		t.Fatalf("WorkflowEvents on schema 10 = %v, %v; want none", evs, err)
	}
	_, _, err = s.RollbackWorkflow(ctx, "billing", 1, "a", "r")
	if !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "run `ffctl migrate`") {
		t.Fatalf("rollback on schema 10: %v, want ErrSchemaOutdated saying to migrate", err)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM workflows`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d versions after the refused rollback (%v), want 2", n, err)
	}
}
