package client_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// fixture is a migrated throwaway database with an application's table
// (orders), the application's pgx pool and a Client on it, the store the
// tests drive the engine with (no daemon runs here), and a raw pool for
// counts.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	s    *store.Store
	db   *sql.DB
	url  string
	pool *pgxpool.Pool
	c    *client.Client
}

const (
	// oneTask is a workflow of one task; keyed's key template needs the
	// param day; pair has a root and a task after it.
	oneTask = "name: one\ntasks:\n  - {name: t, handler: noop}\n"
	keyed   = "name: keyed\ntasks:\n  - {name: t, handler: noop, idempotency_key: 'k-{{ .Params.day }}'}\n"
	pair    = "name: pair\ntasks:\n  - {name: b, handler: noop, depends_on: [a]}\n  - {name: a, handler: noop}\n"
)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s, db, url := storetest.NewWithDB(t)
	f := &fixture{t: t, ctx: t.Context(), s: s, db: db, url: url}
	pool, err := pgxpool.New(f.ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f.pool = pool
	f.c = client.New(pool, client.Options{Actor: "test"})
	t.Cleanup(func() { f.c.Close() })
	for _, src := range []string{oneTask, keyed, pair} {
		storetest.Apply(t, s, src)
	}
	f.exec(`CREATE TABLE orders (id int PRIMARY KEY, note text NOT NULL)`)
	return f
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

func (f *fixture) count(q string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRowContext(f.ctx, q, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// written counts the engine's rows: runs, task runs and outbox rows.
func (f *fixture) written() int {
	f.t.Helper()
	return f.count(`SELECT (SELECT count(*) FROM workflow_runs) + (SELECT count(*) FROM task_runs) + (SELECT count(*) FROM outbox)`)
}

// sqlClient is a Client on a database/sql pool of pgx's driver (NewDB),
// with that pool.
func (f *fixture) sqlClient() (*client.Client, *sql.DB) {
	f.t.Helper()
	db := storetest.DB(f.t, f.url)
	c, err := client.NewDB(db, client.Options{Actor: "test"})
	if err != nil {
		f.t.Fatal(err)
	}
	return c, db
}

// finishRun runs every task of run (roots first, as the scheduler would
// promote them) to SUCCEEDED with result {"ok": true} and settles the
// run, as a worker and a scheduler would.
func (f *fixture) finishRun(run uuid.UUID) {
	f.t.Helper()
	for range 10 {
		if storetest.FinishReady(f.t, f.s, run, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"ok": true}`)}) {
			return
		}
	}
	f.t.Fatalf("run %s did not end", run)
}
