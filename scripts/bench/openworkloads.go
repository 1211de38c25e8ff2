package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// W2o is W2 as an open loop: single-task runs triggered at a fixed offered
// rate (plan.OpenRate for plan.OpenWindow) on a schedule that does not wait
// for earlier triggers to return (openloop.go), then up to plan.OpenDrain
// for the system to finish them. FlowForge: fftrigger -mode open
// (store.Trigger, as W2) against separate daemons at the tree's defaults;
// River: InsertTx + commit per job, its default fetch settings and
// MaxWorkers 2000 (as its other rows).

// openTriggerers is how many triggers W2o can have in flight: at 500 a
// second it falls behind only when a trigger takes more than 64 ms.
const openTriggerers = 32

// Metric names of W2o's samples (with metricN, metricTriggerPerS,
// metricRunsPerS, metricP50 and metricP99).
const (
	metricOfferedPerS = "offered_per_s"      // the schedule's rate
	metricLagP50      = "trigger_lag_p50_ms" // how late triggers were issued
	metricLagP99      = "trigger_lag_p99_ms" //
	metricLagMax      = "trigger_lag_max_ms" //
	// metricFinished is the share of the triggered runs that completed
	// by the end of the drain (1: all); metricAfterWindow those of them
	// that completed after the window, metricUnfinished the runs left.
	metricFinished    = "finished_share"
	metricAfterWindow = "completed_after_window"
	metricUnfinished  = "unfinished"
	// metricAfterWindowS is the last completion's commit, in s after the
	// window's end; only when every run finished.
	metricAfterWindowS = "finished_after_window_s"
	metricP999         = "p999_ms"
)

// openRun is one run (job) of W2o on the database clock: created_at and
// the commit of its completion (zero while it has not completed).
type openRun struct {
	Created, Completed time.Time
}

// Queries of W2o's runs created at or after $1 (the database clock before
// the load), and of the runs (jobs) not finished yet.
const (
	qFFOpenRuns = `
SELECT created_at, CASE WHEN state = 'SUCCEEDED' THEN pg_xact_commit_timestamp(xmin) END
  FROM workflow_runs WHERE workflow_name = '` + wfOne + `' AND created_at >= $1`
	qFFOpenLeft    = `SELECT count(*) FROM workflow_runs WHERE finished_at IS NULL`
	qRiverOpenRuns = `
SELECT created_at, CASE WHEN state = 'completed' THEN pg_xact_commit_timestamp(xmin) END
  FROM river_job WHERE kind = 'noop' AND created_at >= $1`
	qRiverOpenLeft = `SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending')`
)

// openLoad is FlowForge's W2o on a fresh database with the daemons of mode.
func (f *flowforge) openLoad(ctx context.Context, mode string, sched openSchedule, drain time.Duration) (sample, error) {
	return f.onFreshRun(ctx, f.baseDB, mode, func(run *ffRun) (sample, error) {
		t0, err := dbNow(ctx, run.pool)
		if err != nil {
			return sample{}, err
		}
		tr, err := f.trigger(ctx, run.db, "-mode", "open", "-rate", strconv.FormatFloat(sched.Rate, 'f', -1, 64),
			"-duration", sched.Window.String(), "-loops", strconv.Itoa(openTriggerers), "-workflow", wfOne)
		if err != nil {
			return sample{}, err
		}
		return openSample(ctx, run.pool, sched, tr.LagsMS, t0, drain, run.d.failed, qFFOpenLeft, qFFOpenRuns)
	})
}

// openLoad is River's W2o: its client at its default fetch settings in the
// driver, the triggers through a pool of their own (as fftrigger has).
func (s *riverSystem) openLoad(ctx context.Context, sched openSchedule, drain time.Duration) (sample, error) {
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return sample{}, err
	}
	defer d.close(ctx, s.env)
	cfg, err := pgxpool.ParseConfig(s.env.pg.URL(d.name, "postgres"))
	if err != nil {
		return sample{}, fmt.Errorf("river trigger pool: %w", err)
	}
	cfg.MaxConns = openTriggerers + 2
	triggers, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return sample{}, fmt.Errorf("river trigger pool: %w", err)
	}
	defer triggers.Close()
	rc, err := startClient(ctx, d, varRiverDefaults, noopWorkers(), 1000)
	if err != nil {
		return sample{}, err
	}
	defer rc.stop(ctx)
	t0, err := dbNow(ctx, d.pool)
	if err != nil {
		return sample{}, err
	}
	r := runOpenLoop(ctx, sched, openTriggerers, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, triggers, func(tx pgx.Tx) error {
			_, err := d.insert.InsertTx(ctx, tx, noopArgs{}, nil)
			return err
		})
	})
	if r.Errors > 0 {
		return sample{}, fmt.Errorf("river: %d inserts failed, first: %s", r.Errors, r.FirstError)
	}
	alive := func() error { return nil }
	return openSample(ctx, d.pool, sched, r.LagsMS, t0, drain, alive, qRiverOpenLeft, qRiverOpenRuns)
}

// openSample waits up to drain for the runs to finish (qLeft counting
// those that have not; alive failing ends the wait with its error), then
// reads the runs created since t0 (qRuns) and computes W2o's figures; the
// runs still open count with their age at that moment.
func openSample(ctx context.Context, pool *pgxpool.Pool, sched openSchedule, lagsMS []float64, t0 time.Time,
	drain time.Duration, alive func() error, qLeft, qRuns string) (sample, error) {
	s := sample{}
	for deadline := time.Now().Add(drain); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := alive(); err != nil {
			return s, err
		}
		var left int
		if err := pool.QueryRow(ctx, qLeft).Scan(&left); err != nil {
			return s, fmt.Errorf("open runs: %w", err)
		}
		if left == 0 {
			break
		}
	}
	cutoff, err := dbNow(ctx, pool)
	if err != nil {
		return s, err
	}
	rows, err := pool.Query(ctx, qRuns, t0)
	if err != nil {
		return s, fmt.Errorf("open-loop run times: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (openRun, error) {
		var r openRun
		var done *time.Time
		err := row.Scan(&r.Created, &done)
		if done != nil {
			r.Completed = *done
		}
		return r, err
	})
	if err != nil {
		return s, fmt.Errorf("open-loop run times: %w", err)
	}
	if len(runs) != len(lagsMS) {
		s.Note = fmt.Sprintf("%d triggers issued, %d runs found", len(lagsMS), len(runs))
	}
	s.Metrics = openLoopMetrics(sched, lagsMS, runs, cutoff)
	return s, nil
}

// openLoopMetrics are W2o's figures: the offered rate; the rate the
// triggers were issued at (n over the last one's issue time plus one
// interval: the offered rate when none was late) and their lag; the runs
// completed inside the window (first created_at + the window) per second
// of it; the share finished by cutoff and, when all did, how long after
// the window the last one did; and the percentiles of trigger → completion
// committed, a run still open counting with its age at cutoff (a lower
// bound: the unfinished count says how many).
func openLoopMetrics(sched openSchedule, lagsMS []float64, runs []openRun, cutoff time.Time) map[string]float64 {
	m := map[string]float64{metricOfferedPerS: sched.Rate, metricN: float64(len(runs))}
	if n := len(lagsMS); n > 0 {
		issued := sched.due(n-1).Seconds() + lagsMS[n-1]/1000 + 1/sched.Rate
		m[metricTriggerPerS] = float64(n) / issued
		m[metricLagP50], m[metricLagP99], m[metricLagMax] = percentile(lagsMS, 50), percentile(lagsMS, 99), percentile(lagsMS, 100)
	}
	if len(runs) == 0 {
		return m
	}
	start := runs[0].Created
	for _, r := range runs {
		if r.Created.Before(start) {
			start = r.Created
		}
	}
	end := start.Add(sched.Window)
	lat := make([]float64, len(runs))
	var inside, done int
	var last time.Time
	for i, r := range runs {
		at := cutoff
		if !r.Completed.IsZero() {
			at, done = r.Completed, done+1
			if !at.After(end) {
				inside++
			}
			if at.After(last) {
				last = at
			}
		}
		lat[i] = float64(at.Sub(r.Created)) / float64(time.Millisecond)
	}
	m[metricRunsPerS] = float64(inside) / sched.Window.Seconds()
	m[metricFinished] = float64(done) / float64(len(runs))
	m[metricAfterWindow] = float64(done - inside)
	m[metricUnfinished] = float64(len(runs) - done)
	if done == len(runs) {
		m[metricAfterWindowS] = last.Sub(end).Seconds()
	}
	m[metricP50], m[metricP99], m[metricP999] = percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9)
	return m
}

// openJobs are W2o's jobs of a FlowForge column: separate daemons at the
// tree's defaults.
func (s *ffSystem) openJobs() []job {
	p := s.env.plan
	sched := openSchedule{Rate: p.OpenRate, Window: p.OpenWindow}
	return []job{{System: s.sysKey, Workload: workloadOpen, Variant: "daemon separate", run: func(ctx context.Context, _ int) (sample, error) {
		return s.ff.openLoad(ctx, "separate", sched, p.OpenDrain)
	}}}
}

// openJobs is River's W2o job.
func (s *riverSystem) openJobs() []job {
	p := s.env.plan
	sched := openSchedule{Rate: p.OpenRate, Window: p.OpenWindow}
	return []job{{System: sysRiver, Workload: workloadOpen, Variant: varRiverDefaults, run: func(ctx context.Context, _ int) (sample, error) {
		return s.openLoad(ctx, sched, p.OpenDrain)
	}}}
}

// openRows are W2o's lines of the table.
func openRows(p plan) []rowSpec {
	cells := map[string]pick{
		sysFF: pickOf(workloadOpen, "daemon separate"), sysFFBefore: pickOf(workloadOpen, "daemon separate"),
		sysRiver: pickOf(workloadOpen, varRiverDefaults),
	}
	na := map[string]string{sysCelery: "-", sysCeiling: "-"}
	drain := fmt.Sprintf("%.0f s", p.OpenDrain.Seconds())
	rows := []rowSpec{
		{Label: fmt.Sprintf("W2o open loop, %g runs/s offered for %.0f s: triggers issued/s", p.OpenRate, p.OpenWindow.Seconds()),
			Metric: metricTriggerPerS, HigherBetter: true},
		{Label: "W2o · trigger lag behind schedule, max ms", Metric: metricLagMax},
		{Label: "W2o · runs/s completed inside the window", Metric: metricRunsPerS, HigherBetter: true},
		{Label: "W2o · runs finished ÷ triggered, " + drain + " after the window", Metric: metricFinished, HigherBetter: true},
		{Label: "W2o · last run finished, s after the window", Metric: metricAfterWindowS,
			Missing: "not all finished within " + drain},
		{Label: "W2o · p50 trigger→completion committed, ms", Metric: metricP50},
		{Label: "W2o · p99 trigger→completion committed, ms", Metric: metricP99},
		{Label: "W2o · p99.9 trigger→completion committed, ms", Metric: metricP999},
	}
	for i := range rows {
		rows[i].Cells, rows[i].NA = cells, na
	}
	return rows
}
