package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// order is an application's params: a struct, encoded by the client.
type order struct {
	ID   int    `json:"id"`
	Note string `json:"note"`
}

func pgxCaller(f *fixture) (func(int) error, func(any) (client.TriggerResult, error), func(bool) error) {
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	insert := func(id int) error {
		_, err := tx.Exec(f.ctx, `INSERT INTO orders (id, note) VALUES ($1, 'from pgx')`, id)
		return err
	}
	trigger := func(p any) (client.TriggerResult, error) {
		return f.c.TriggerTx(f.ctx, tx, "pair", p, client.TriggerOptions{})
	}
	end := func(commit bool) error {
		if commit {
			return tx.Commit(f.ctx)
		}
		return tx.Rollback(f.ctx)
	}
	return insert, trigger, end
}

func sqlCaller(f *fixture) (func(int) error, func(any) (client.TriggerResult, error), func(bool) error) {
	c, db := f.sqlClient()
	tx, err := db.BeginTx(f.ctx, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback() })
	insert := func(id int) error {
		_, err := tx.ExecContext(f.ctx, `INSERT INTO orders (id, note) VALUES ($1, 'from database/sql')`, id)
		return err
	}
	trigger := func(p any) (client.TriggerResult, error) {
		return c.TriggerSQLTx(f.ctx, tx, "pair", p, client.TriggerOptions{})
	}
	end := func(commit bool) error {
		if commit {
			return tx.Commit()
		}
		return tx.Rollback()
	}
	return insert, trigger, end
}

// TestATriggerCommitsOrRollsBackWithTheCallersTransaction: the run, its
// task runs and the root's outbox row are invisible until the caller's
// transaction commits, and then there with the caller's own row; a
// rollback leaves no run, no task, no outbox row and no order. Both for a
// pgx.Tx and a *sql.Tx.
func TestATriggerCommitsOrRollsBackWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	callers := map[string]func(*fixture) (func(int) error, func(any) (client.TriggerResult, error), func(bool) error){
		"pgx.Tx": pgxCaller, "*sql.Tx": sqlCaller,
	}
	for name, begin := range callers {
		for _, commit := range []bool{true, false} {
			t.Run(name+map[bool]string{true: " commit", false: " rollback"}[commit], func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				insert, trigger, end := begin(f)
				if err := insert(42); err != nil {
					t.Fatal(err)
				}
				res, err := trigger(order{ID: 42, Note: "<gift>"})
				if err != nil || res.Existing {
					t.Fatalf("trigger: %+v, %v", res, err)
				}
				if n := f.written(); n != 0 {
					t.Fatalf("%d rows of the engine visible before the caller's commit, want 0", n)
				}
				if err := end(commit); err != nil {
					t.Fatal(err)
				}
				if !commit {
					if n, o := f.written(), f.count(`SELECT count(*) FROM orders`); n != 0 || o != 0 {
						t.Fatalf("after the rollback: %d rows of the engine and %d orders, want none", n, o)
					}
					return
				}
				checkCommitted(t, f, res.RunID)
			})
		}
	}
}

// checkCommitted checks the committed run of pair with the order 42: its
// params as the application encoded them (HTML unescaped), its root READY
// with one outbox row, the other task PENDING without one.
func checkCommitted(t *testing.T, f *fixture, id uuid.UUID) {
	t.Helper()
	if n := f.count(`SELECT count(*) FROM orders WHERE id = 42`); n != 1 {
		t.Fatalf("%d orders 42 after the commit, want 1", n)
	}
	run, err := f.c.Run(f.ctx, id.String())
	if err != nil {
		t.Fatal(err)
	}
	if string(run.Params) != `{"id": 42, "note": "<gift>"}` || run.Workflow != "pair" {
		t.Fatalf("run %s of %s with params %s", run.ID, run.Workflow, run.Params)
	}
	if len(run.Tasks) != 2 || run.Tasks[0].Name != "a" || run.Tasks[0].State != "READY" || run.Tasks[1].State != "PENDING" {
		t.Fatalf("tasks %+v, want a READY then b PENDING (DAG order)", run.Tasks)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE task_run_id = $1 AND published_at IS NULL`, run.Tasks[0].ID); n != 1 {
		t.Fatalf("%d pending outbox rows for the root, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox`); n != 1 {
		t.Fatalf("%d outbox rows, want the root's only", n)
	}
}

// TestABatchCommitsOrRollsBackWithTheCallersTransaction: TriggerManyTx's
// runs are all there after the commit, in the order given, and none after
// a rollback.
func TestABatchCommitsOrRollsBackWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		f := newFixture(t)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := f.c.TriggerManyTx(f.ctx, tx, "one", []any{order{ID: 1}, nil, map[string]int{"n": 3}}, client.TriggerManyOptions{})
		if err != nil || len(ids) != 3 {
			t.Fatalf("trigger many: %v, %v", ids, err)
		}
		if commit {
			err = tx.Commit(f.ctx)
		} else {
			err = tx.Rollback(f.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !commit {
			if n := f.written(); n != 0 {
				t.Fatalf("%d rows after the rollback", n)
			}
			continue
		}
		for i, want := range []string{`{"id": 1, "note": ""}`, `{}`, `{"n": 3}`} {
			if r, err := f.c.Run(f.ctx, ids[i].String()); err != nil || string(r.Params) != want {
				t.Fatalf("run %d: params %s (%v), want %s", i, r.Params, err, want)
			}
		}
	}
}

// TestFiftyConcurrentTriggersWithOneKeyMakeOneRun: half on the pool,
// half each in a transaction of its own that commits; one run is created
// and every trigger names it, all but one as Existing.
func TestFiftyConcurrentTriggersWithOneKeyMakeOneRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 50
	opts := client.TriggerOptions{IdempotencyKey: "order-7"}
	results := make([]client.TriggerResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				results[i], errs[i] = f.c.Trigger(f.ctx, "one", order{ID: 7}, opts)
				return
			}
			results[i], errs[i] = triggerInTx(f, opts)
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("trigger %d: %v", i, errs[i])
		}
		if results[i].RunID != results[0].RunID {
			t.Fatalf("trigger %d named run %s, trigger 0 run %s", i, results[i].RunID, results[0].RunID)
		}
		if !results[i].Existing {
			created++
		}
	}
	if runs := f.count(`SELECT count(*) FROM workflow_runs`); runs != 1 || created != 1 {
		t.Fatalf("%d runs, %d triggers said they created it; want 1 and 1", runs, created)
	}
}

// triggerInTx triggers a run of one with order 7 in a transaction of its
// own, and commits it.
func triggerInTx(f *fixture, opts client.TriggerOptions) (client.TriggerResult, error) {
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		return client.TriggerResult{}, err
	}
	defer tx.Rollback(f.ctx)
	res, err := f.c.TriggerTx(f.ctx, tx, "one", order{ID: 7}, opts)
	if err != nil {
		return res, err
	}
	return res, tx.Commit(f.ctx)
}

// TestAKeyReusedWithOtherParamsIsAConflict: the same key with other params
// (or another workflow) is ErrConflict naming the run, and writes nothing.
func TestAKeyReusedWithOtherParamsIsAConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first, err := f.c.Trigger(f.ctx, "one", order{ID: 1}, client.TriggerOptions{IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"other params": func() error {
			_, err := f.c.Trigger(f.ctx, "one", order{ID: 2}, client.TriggerOptions{IdempotencyKey: "k"})
			return err
		},
		"other workflow": func() error {
			_, err := f.c.Trigger(f.ctx, "pair", order{ID: 1}, client.TriggerOptions{IdempotencyKey: "k"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, client.ErrConflict) || !contains(err, first.RunID.String()) {
			t.Errorf("%s: %v, want ErrConflict naming run %s", name, err, first.RunID)
		}
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// TestNewDBRefusesAnotherDriver: a *sql.DB whose driver is not pgx's is
// bad input.
func TestNewDBRefusesAnotherDriver(t *testing.T) {
	t.Parallel()
	if _, err := client.NewDB(storetest.ForeignDriverDB(t), client.Options{}); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("NewDB of another driver: %v, want ErrInvalidInput", err)
	}
}

// statementCounter is a pgx tracer counting the statements and prepares a
// pool's connections send.
type statementCounter struct {
	statements, prepares atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}

func (c *statementCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestATriggerInATransactionIsOneStatement: once the client has the
// definition cached and the connection has prepared the statement (pgx's
// default mode: on its first use there), TriggerTx sends the caller's
// transaction one statement and prepares nothing: one round trip. The
// first trigger of a workflow reads its definition there first, and a key
// already taken costs one read of its run.
func TestATriggerInATransactionIsOneStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1 // one connection: what it prepared, it keeps
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := client.New(pool, client.Options{})
	defer c.Close()
	for i, want := range []struct {
		key                  string
		statements, prepares int64
	}{{"", 2, 2}, {"", 1, 0}, {"a", 1, 0}, {"a", 2, 1}, {"a", 2, 0}, {"", 1, 0}} {
		tx, err := pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		before, prepared := counter.statements.Load(), counter.prepares.Load()
		if _, err := c.TriggerTx(f.ctx, tx, "one", nil, client.TriggerOptions{IdempotencyKey: want.key}); err != nil {
			t.Fatal(err)
		}
		if n, p := counter.statements.Load()-before, counter.prepares.Load()-prepared; n != want.statements || p != want.prepares {
			t.Errorf("trigger %d (key %q): %d statements and %d prepares on the transaction, want %d and %d", i, want.key, n, p, want.statements, want.prepares)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAPausedWorkflowRefusesTriggersWithErrPaused: a pause with mode drop
// refuses a trigger on the pool and in a transaction with ErrPaused, and
// creates nothing; in a transaction the statement itself succeeded, so
// the transaction goes on, and its drop is counted only if it commits.
func TestAPausedWorkflowRefusesTriggersWithErrPaused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.s.PauseWorkflow(f.ctx, "one", core.PauseDrop, "test", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Trigger(f.ctx, "one", nil, client.TriggerOptions{}); !errors.Is(err, client.ErrPaused) {
		t.Fatalf("trigger on the pool: %v, want ErrPaused", err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	if _, err := f.c.TriggerTx(f.ctx, tx, "one", nil, client.TriggerOptions{}); !errors.Is(err, client.ErrPaused) {
		t.Fatalf("trigger in a transaction: %v, want ErrPaused", err)
	}
	if _, err := tx.Exec(f.ctx, `INSERT INTO orders (id, note) VALUES (1, 'kept')`); err != nil {
		t.Fatalf("the transaction after ErrPaused: %v", err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n, o := f.written(), f.count(`SELECT count(*) FROM orders`); n != 0 || o != 1 {
		t.Fatalf("%d rows of the engine and %d orders, want none and the order", n, o)
	}
	if d := f.count(`SELECT dropped FROM workflow_pauses WHERE workflow_name = 'one'`); d != 2 {
		t.Fatalf("%d triggers counted as dropped, want 2", d)
	}
}
