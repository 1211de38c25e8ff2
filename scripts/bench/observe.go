package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Latency is observed on the database clock for every system: the start is
// the row's created_at (now() of the inserting transaction) and the end the
// commit time of the transaction that last wrote the row
// (pg_xact_commit_timestamp(xmin), track_commit_timestamp=on), i.e. the
// moment the completion became durable. A finished run or job is not
// written again, so xmin is the completing transaction. In a continuous
// workload (W2, W5) both the throughput and the percentiles are of the
// runs triggered and completed inside the window: a system that cannot
// keep up with its triggerers builds a backlog, which is not waited for.

// ffRunTimes returns, for each run of workflow wf created at or after since
// whose SUCCEEDED committed before until (zero: any time), trigger →
// SUCCEEDED committed and trigger → finished_at (the stamp the settling
// statement writes), in milliseconds, plus the latest commit time.
func ffRunTimes(ctx context.Context, pool *pgxpool.Pool, wf string, since, until time.Time) (committed, stamped []float64, last time.Time, err error) {
	rows, err := pool.Query(ctx, `
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at) * 1000,
       extract(epoch FROM finished_at - created_at) * 1000,
       pg_xact_commit_timestamp(xmin)
  FROM workflow_runs WHERE workflow_name = $1 AND created_at >= $2 AND state = 'SUCCEEDED'
   AND ($3::timestamptz IS NULL OR pg_xact_commit_timestamp(xmin) < $3)`, wf, since, nullTime(until))
	if err != nil {
		return nil, nil, last, fmt.Errorf("run times: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c, s float64
		var at time.Time
		if err := rows.Scan(&c, &s, &at); err != nil {
			return nil, nil, last, fmt.Errorf("run times: %w", err)
		}
		committed, stamped = append(committed, c), append(stamped, s)
		if at.After(last) {
			last = at
		}
	}
	return committed, stamped, last, rows.Err()
}

// addPublisherShare adds to m the publisher's share of a FlowForge
// workload, from the outbox rows created in [since, until) (zero times: no
// bound), on the database clock: trigger → the stamp committed
// (pg_xact_commit_timestamp(xmin) of the row, which only the stamp rewrites;
// published_at is now() of the publisher's transaction, i.e. its start)
// p50/p99 in ms (metricOutboxP50/P99), and the first → last stamp
// committed in s (metricOutboxSpanS). Rows not published are left out.
func addPublisherShare(ctx context.Context, pool *pgxpool.Pool, since, until time.Time, m map[string]float64) error {
	var p50, p99, span *float64
	err := pool.QueryRow(ctx, `
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at) * 1000),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at) * 1000),
       extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - min(pg_xact_commit_timestamp(xmin)))::float8
  FROM outbox WHERE published_at IS NOT NULL
   AND ($1::timestamptz IS NULL OR created_at >= $1) AND ($2::timestamptz IS NULL OR created_at < $2)`,
		nullTime(since), nullTime(until)).Scan(&p50, &p99, &span)
	if err != nil {
		return fmt.Errorf("publisher share: %w", err)
	}
	for k, v := range map[string]*float64{metricOutboxP50: p50, metricOutboxP99: p99, metricOutboxSpanS: span} {
		if v != nil {
			m[k] = *v
		}
	}
	return nil
}

// ffWaitSettled polls until no run of db is open (finished_at IS NULL),
// failing early when alive reports a dead daemon. It then checks that every
// run SUCCEEDED.
func ffWaitSettled(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration, alive func() error) error {
	err := pollEvery(100*time.Millisecond, timeout, func() (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		var open int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM workflow_runs WHERE finished_at IS NULL`).Scan(&open)
		return open == 0, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the runs to settle: %w", err)
	}
	var bad int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM workflow_runs WHERE state <> 'SUCCEEDED'`).Scan(&bad); err != nil {
		return fmt.Errorf("checking run states: %w", err)
	}
	if bad > 0 {
		return fmt.Errorf("%d runs did not succeed", bad)
	}
	return nil
}

// dbNow is the database clock.
func dbNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var t time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return t, fmt.Errorf("clock_timestamp: %w", err)
	}
	return t, nil
}

// pollEvery calls f every period until it is done, fails, or timeout passes.
func pollEvery(period, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		time.Sleep(period)
	}
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// latencyMetrics summarises trigger → committed and trigger → stamp.
func latencyMetrics(committed, stamped []float64) map[string]float64 {
	return map[string]float64{
		metricP50: percentile(committed, 50), metricP99: percentile(committed, 99),
		metricStampP50: percentile(stamped, 50), metricStampP99: percentile(stamped, 99),
	}
}

// windowMetrics are a continuous workload's figures: completions per second
// of the window, triggers per second, and the completions' latencies.
func windowMetrics(committed, stamped []float64, triggered int64, window time.Duration) map[string]float64 {
	m := latencyMetrics(committed, stamped)
	m[metricRunsPerS] = float64(len(committed)) / window.Seconds()
	m[metricTriggerPerS] = float64(triggered) / window.Seconds()
	return m
}
