package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// buildHistory creates histDB: baseDB with n finished single-task runs in
// it. One real run goes through this build's daemons first (the seed);
// its rows in every table that holds a run's rows (workflow_runs, and each
// table with a run_id or task_run_id column: task_runs, task_events,
// outbox, ...) are then copied n times with fresh ids and timestamps
// shifted back in time (spread over historySpan before the seed), so the history
// has exactly the shape this version leaves behind. Ends with VACUUM
// ANALYZE and a CHECKPOINT, so every clone starts from the same state.
func (f *flowforge) buildHistory(ctx context.Context, n int) error {
	start := time.Now()
	if err := f.env.pg.createDB(ctx, f.histDB, f.baseDB); err != nil {
		return err
	}
	pool, err := f.env.pg.pool(ctx, f.histDB)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := f.seedRun(ctx, pool); err != nil {
		return err
	}
	if err := f.copySeed(ctx, pool, n); err != nil {
		return err
	}
	pool.Close()
	for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if err := execIn(ctx, f.env, f.histDB, q); err != nil {
			return err
		}
	}
	f.env.log("  %s: history of %d finished task runs built in %.0f s", f.build.Label, n, time.Since(start).Seconds())
	return nil
}

// deriveHistory makes histDB a copy of src's history database migrated
// with this build's ffctl: both versions leave the same rows per finished
// run (3 written by the trigger, 7 by the daemons, in the same tables), so
// the history is built once per make bench.
func (f *flowforge) deriveHistory(ctx context.Context, src *flowforge) error {
	start := time.Now()
	if err := f.env.pg.createDB(ctx, f.histDB, src.histDB); err != nil {
		return err
	}
	if _, err := f.ffctl(ctx, f.env.pg.URL(f.histDB, "postgres"), "migrate"); err != nil {
		return err
	}
	for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if err := execIn(ctx, f.env, f.histDB, q); err != nil {
			return err
		}
	}
	f.env.log("  %s: history copied from %s and migrated in %.0f s", f.build.Label, src.build.Label, time.Since(start).Seconds())
	return nil
}

// seedRun runs one single-task run through `daemon all` on the history
// database.
func (f *flowforge) seedRun(ctx context.Context, pool *pgxpool.Pool) error {
	d, err := f.startDaemons(f.histDB, "all")
	if err != nil {
		return err
	}
	_, err = f.trigger(ctx, f.histDB, "-mode", "bulk", "-n", "1", "-loops", "1", "-workflow", wfOne)
	if err == nil {
		err = ffWaitSettled(ctx, pool, 2*time.Minute, d.failed)
	}
	d.stop()
	f.env.deleteQueues(ctx, d.queue)
	if err != nil {
		return fmt.Errorf("history seed run: %w", err)
	}
	return nil
}

// copySeed copies the seed run's rows n times (in batches, each its own
// transaction).
func (f *flowforge) copySeed(ctx context.Context, pool *pgxpool.Pool, n int) error {
	var seedRun, seedTask string
	err := pool.QueryRow(ctx, `SELECT r.id::text, t.id::text FROM workflow_runs r JOIN task_runs t ON t.run_id = r.id`).Scan(&seedRun, &seedTask)
	if err != nil {
		return fmt.Errorf("history seed: %w", err)
	}
	stmts, err := historyStatements(ctx, pool, seedRun, seedTask)
	if err != nil {
		return err
	}
	const batch = 100_000
	for lo := 0; lo < n; lo += batch {
		if err := copyBatch(ctx, pool, stmts, lo, min(lo+batch, n), n); err != nil {
			return err
		}
	}
	return nil
}

// historySpan is how far back a history reaches: its n runs (or jobs) are
// spread evenly over it, all inside River's 24 h retention of completed
// jobs.
const historySpan = 20 * time.Hour

// copyBatch inserts copies lo+1..hi of the seed, copy i shifted back by
// historySpan × (n − i + 1) / n. The copies' ids are version-4-shaped UUIDs
// in ascending order, so the B-trees are appended to rather than split
// at random (the build takes a fraction of the time); the runs the
// workloads trigger get random ones, as always.
func copyBatch(ctx context.Context, pool *pgxpool.Pool, stmts []string, lo, hi, n int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE ids ON COMMIT DROP AS
SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid AS run_id,
       ('00000000-0000-4000-9000-' || lpad(to_hex(i), 12, '0'))::uuid AS task_id,
       -make_interval(secs => $4::float8 * ($3::int - i + 1)) AS shift
  FROM generate_series($1::int + 1, $2::int) AS i`, lo, hi, n, historySpan.Seconds()/float64(n))
	if err != nil {
		return fmt.Errorf("history ids: %w", err)
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("history: %s: %w", firstLine(q), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// historyStatements builds, from the schema as this version has it, one
// INSERT … SELECT per table holding the seed run's rows: ids replaced,
// timestamps shifted, serial ids and the run's idempotency key left to
// their defaults.
func historyStatements(ctx context.Context, pool *pgxpool.Pool, seedRun, seedTask string) ([]string, error) {
	rows, err := pool.Query(ctx, `
SELECT c.table_name, array_agg(c.column_name::text ORDER BY c.ordinal_position),
       array_agg(c.data_type::text ORDER BY c.ordinal_position),
       array_agg(coalesce(c.column_default, '') ORDER BY c.ordinal_position)
  FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
 WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
 GROUP BY c.table_name
HAVING c.table_name = 'workflow_runs' OR bool_or(c.column_name IN ('run_id', 'task_run_id'))
 ORDER BY c.table_name = 'workflow_runs' DESC, c.table_name = 'task_runs' DESC, c.table_name`)
	if err != nil {
		return nil, fmt.Errorf("history tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var table string
		var cols, types, defaults []string
		if err := rows.Scan(&table, &cols, &types, &defaults); err != nil {
			return nil, fmt.Errorf("history tables: %w", err)
		}
		out = append(out, copyStatement(table, cols, types, defaults, seedRun, seedTask))
	}
	return out, rows.Err()
}

// copyStatement is the INSERT … SELECT that copies table's seed rows once
// per row of the temporary table ids.
func copyStatement(table string, cols, types, defaults []string, seedRun, seedTask string) string {
	var names, exprs []string
	hasRunID := false
	for i, c := range cols {
		var e string
		switch {
		case c == "id" && table == "workflow_runs", c == "run_id":
			e = "ids.run_id"
		case c == "id" && table == "task_runs", c == "task_run_id":
			e = "ids.task_id"
		case strings.HasPrefix(defaults[i], "nextval("):
			continue
		case c == "idempotency_key" && table == "workflow_runs":
			e = "NULL"
		case types[i] == "timestamp with time zone":
			e = "s." + quoteIdent(c) + " + ids.shift"
		default:
			e = "s." + quoteIdent(c)
		}
		hasRunID = hasRunID || c == "run_id"
		names, exprs = append(names, quoteIdent(c)), append(exprs, e)
	}
	cond := "s.task_run_id = '" + seedTask + "'"
	switch {
	case table == "workflow_runs":
		cond = "s.id = '" + seedRun + "'"
	case hasRunID:
		cond = "s.run_id = '" + seedRun + "'"
	}
	return "INSERT INTO " + quoteIdent(table) + " (" + strings.Join(names, ", ") + ") SELECT " +
		strings.Join(exprs, ", ") + " FROM " + quoteIdent(table) + " s CROSS JOIN ids WHERE " + cond
}

// execIn runs one statement in database db as the observer.
func execIn(ctx context.Context, env *benchEnv, db, q string) error {
	pool, err := env.pg.pool(ctx, db)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s on %s: %w", q, db, err)
	}
	return nil
}
