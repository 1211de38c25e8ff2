package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// callerStore applies oneTask and returns a Store on a database/sql pool
// of one connection, as an application with a small pool would hand it
// over (store.FromDB), with that pool; cached: the Store has triggered one
// run of oneTask, so it has its definition cached.
func callerStore(t *testing.T, f *fixture, cached bool) (*store.Store, *sql.DB) {
	t.Helper()
	f.apply(oneTask)
	db := storetest.DB(t, f.url)
	db.SetMaxOpenConns(1)
	s, err := store.FromDB(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cached {
		if _, err := s.Trigger(f.ctx, store.TriggerRequest{Workflow: "one"}); err != nil {
			t.Fatal(err)
		}
	}
	return s, db
}

// triggerInTx triggers req with s.TriggerTx in a transaction of db, calls
// beforeCommit (when not nil), commits, and returns the trigger's result;
// an error fails the test.
func triggerInTx(ctx context.Context, t *testing.T, s *store.Store, db *sql.DB, req store.TriggerRequest, beforeCommit func()) store.TriggerResult {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	res, err := s.TriggerTx(ctx, store.SQLQuerier(tx), req)
	if err != nil {
		t.Fatalf("trigger in a transaction: %v", err)
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestATriggerInACallersTransactionReadsItsDefinitionThere: with no
// definition cached, TriggerTx reads it on the caller's transaction, so a
// pool of one connection, which that transaction holds, does not deadlock;
// and the run commits with the transaction.
func TestATriggerInACallersTransactionReadsItsDefinitionThere(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, pool := callerStore(t, f, false)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	res := triggerInTx(ctx, t, s, pool, store.TriggerRequest{Workflow: "one", Params: json.RawMessage(`{"day": "mon"}`)}, func() {
		if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
			t.Fatalf("%d runs visible before the commit, want 0", n)
		}
	})
	if r := f.run(res.RunID); r.Workflow != "one" || string(r.Params) != `{"day": "mon"}` {
		t.Fatalf("run %+v after the commit", r)
	}
}

// TestATriggerInACallersTransactionRetriesAStaleDefinition: a definition
// cached before a new version was applied elsewhere is found stale by the
// statement, reloaded on the transaction and the run made of the new
// version, within the same transaction.
func TestATriggerInACallersTransactionRetriesAStaleDefinition(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, pool := callerStore(t, f, true) // version 1 cached
	f.apply(oneTask + "description: version 2\n")
	res := triggerInTx(f.ctx, t, s, pool, store.TriggerRequest{Workflow: "one"}, nil)
	if v := f.run(res.RunID).WorkflowVersion; v != 2 {
		t.Fatalf("run of version %d, want 2 (the newest)", v)
	}
}

// TestAFailedTriggerInACallersTransactionIsNotAnUnansweredCommit: the
// statement's error in a caller's transaction is not reported as a commit
// whose outcome is unknown (nothing commits before the caller's COMMIT).
func TestAFailedTriggerInACallersTransactionIsNotAnUnansweredCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, pool := callerStore(t, f, true)
	tx, err := pool.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err = s.TriggerTx(ctx, store.SQLQuerier(tx), store.TriggerRequest{Workflow: "one"})
	if err == nil || errors.Is(err, store.ErrCommitOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("trigger with a cancelled context in a transaction: %v, want context.Canceled and not ErrCommitOutcomeUnknown", err)
	}
	_, err = s.Trigger(ctx, store.TriggerRequest{Workflow: "one"})
	if !errors.Is(err, store.ErrCommitOutcomeUnknown) {
		t.Fatalf("trigger with a cancelled context on the pool: %v, want ErrCommitOutcomeUnknown (the statement is its own commit)", err)
	}
}

// TestFromDBRefusesAnotherDriver: the trigger's arguments are pgx's, so a
// pool of another driver is refused at once.
func TestFromDBRefusesAnotherDriver(t *testing.T) {
	t.Parallel()
	if _, err := store.FromDB(storetest.ForeignDriverDB(t), nil); err == nil {
		t.Fatal("FromDB accepted a pool of another driver")
	}
}
