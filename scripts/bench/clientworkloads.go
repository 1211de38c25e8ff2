package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// W6's application paths (see triggerworkloads.go): FlowForge's
// client.TriggerTx and client.TriggerMany through fftrigger -mode tx and
// many (the tree's own client, in a process of its own with a pool of
// w6Loops+2 connections), River's InsertTx and InsertMany in the driver
// (its pool of 40); each load on a fresh database, timed by closedloop.go.

// The application's own table and write in W6's transactions: each
// TriggerTx (InsertTx) runs in a transaction that first inserts an order,
// as "store the order and start its workflow" does.
const (
	appTableDDL = `CREATE TABLE bench_orders (id bigserial PRIMARY KEY, placed_at timestamptz NOT NULL DEFAULT now(), note text NOT NULL)`
	appInsert   = `INSERT INTO bench_orders (note) VALUES ('order')`
	appTable    = "bench_orders"
)

// loadFigures are a W6 load's figures: n runs (jobs) committed by its
// timed calls, per second of them, and the calls' p50 and p99 (ms).
func loadFigures(n int64, seconds float64, latMS []float64) map[string]float64 {
	return map[string]float64{
		metricN: float64(n), metricTriggerPerS: float64(n) / seconds,
		metricCallP50: percentile(latMS, 50), metricCallP99: percentile(latMS, 99),
	}
}

// warmRuns is how many runs (jobs) a load's untimed warm-up calls make.
func (l closedLoad) warmRuns(perCall int) int64 {
	return int64(max(l.Loops, 1) * l.Warm * perCall)
}

// checkRows checks that each of tables of database pool holds want rows:
// every call committed what it should, and nothing else did.
func checkRows(ctx context.Context, pool *pgxpool.Pool, want int64, tables ...string) error {
	for _, t := range tables {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(t)).Scan(&n); err != nil {
			return fmt.Errorf("count %s: %w", t, err)
		}
		if n != want {
			return fmt.Errorf("%s holds %d rows after the load, want %d", t, n, want)
		}
	}
	return nil
}

// onFreshDB runs fn on a fresh clone of the template database (dropped
// after) with a pool on it as the observer.
func (f *flowforge) onFreshDB(ctx context.Context, fn func(db string, pool *pgxpool.Pool) (sample, error)) (sample, error) {
	db, err := f.freshDB(ctx, f.baseDB)
	if err != nil {
		return sample{}, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	pool, err := f.env.pg.pool(ctx, db)
	if err != nil {
		return sample{}, err
	}
	defer pool.Close()
	return fn(db, pool)
}

// clientLoad runs fftrigger -mode (tx or many) with load on db and checks
// the runs it made (and, with tables, the application's rows).
func (f *flowforge) clientLoad(ctx context.Context, db string, pool *pgxpool.Pool, load closedLoad, perCall int, args []string, tables ...string) (sample, error) {
	args = append(args, "-workflow", wfOne, "-loops", strconv.Itoa(load.Loops), "-warm", strconv.Itoa(load.Warm),
		"-n", strconv.Itoa(load.N*perCall), "-duration", load.Window.String())
	tr, err := f.trigger(ctx, db, args...)
	if err != nil {
		return sample{}, err
	}
	if err := checkRows(ctx, pool, tr.Triggered+load.warmRuns(perCall), append(tables, "workflow_runs")...); err != nil {
		return sample{}, fmt.Errorf("%s: %w", f.build.Label, err)
	}
	return sample{Metrics: loadFigures(tr.Triggered, tr.Seconds, tr.LatMS)}, nil
}

// triggerTx is FlowForge's TriggerTx load: each call begins a
// transaction, inserts an order, calls client.TriggerTx and commits.
func (f *flowforge) triggerTx(ctx context.Context, load closedLoad) (sample, error) {
	return f.onFreshDB(ctx, func(db string, pool *pgxpool.Pool) (sample, error) {
		if _, err := pool.Exec(ctx, appTableDDL); err != nil {
			return sample{}, fmt.Errorf("application table: %w", err)
		}
		return f.clientLoad(ctx, db, pool, load, 1, []string{"-mode", "tx", "-app-insert", appInsert}, appTable)
	})
}

// triggerMany is FlowForge's TriggerMany load: n runs in batches of
// w6BatchSize, one call at a time, after one untimed batch.
func (f *flowforge) triggerMany(ctx context.Context, n int) (sample, error) {
	return f.onFreshDB(ctx, func(db string, pool *pgxpool.Pool) (sample, error) {
		load := closedLoad{Loops: 1, Warm: 1, N: n / w6BatchSize}
		return f.clientLoad(ctx, db, pool, load, w6BatchSize, []string{"-mode", "many", "-batch", strconv.Itoa(w6BatchSize)})
	})
}

// riverLoad runs load on a fresh River database through call (given the
// database, after prepare) and checks the jobs it made (and, with tables,
// the application's rows); perCall is the jobs a call inserts.
func (s *riverSystem) riverLoad(ctx context.Context, load closedLoad, perCall int, prepare string, call func(d *riverDB) func(context.Context) error, tables ...string) (sample, error) {
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return sample{}, err
	}
	defer d.close(ctx, s.env)
	if prepare != "" {
		if _, err := d.pool.Exec(ctx, prepare); err != nil {
			return sample{}, fmt.Errorf("river: %s: %w", prepare, err)
		}
	}
	r := runClosedLoop(ctx, load, call(d))
	if r.Errors > 0 {
		return sample{}, fmt.Errorf("river: %d calls failed, first: %s", r.Errors, r.FirstError)
	}
	n := r.Calls * int64(perCall)
	if err := checkRows(ctx, d.pool, n+load.warmRuns(perCall), append(tables, "river_job")...); err != nil {
		return sample{}, fmt.Errorf("river: %w", err)
	}
	return sample{Metrics: loadFigures(n, r.Seconds, r.LatMS)}, nil
}

// insertTx is River's InsertTx load, FlowForge's TriggerTx's twin: each
// call begins a transaction, inserts an order, calls InsertTx and commits.
func (s *riverSystem) insertTx(ctx context.Context, load closedLoad) (sample, error) {
	return s.riverLoad(ctx, load, 1, appTableDDL, func(d *riverDB) func(context.Context) error {
		return func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, appInsert); err != nil {
					return fmt.Errorf("application insert: %w", err)
				}
				if _, err := d.insert.InsertTx(ctx, tx, noopArgs{}, nil); err != nil {
					return fmt.Errorf("river InsertTx: %w", err)
				}
				return nil
			})
		}
	}, appTable)
}

// insertMany is River's InsertMany load: n no-op jobs in batches of
// w6BatchSize, one call at a time, after one untimed batch (no client
// works them).
func (s *riverSystem) insertMany(ctx context.Context, n int) (sample, error) {
	params := make([]river.InsertManyParams, w6BatchSize)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	load := closedLoad{Loops: 1, Warm: 1, N: n / w6BatchSize}
	return s.riverLoad(ctx, load, w6BatchSize, "", func(d *riverDB) func(context.Context) error {
		return func(ctx context.Context) error {
			if _, err := d.insert.InsertMany(ctx, params); err != nil {
				return fmt.Errorf("river InsertMany: %w", err)
			}
			return nil
		}
	})
}
