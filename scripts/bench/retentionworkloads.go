package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// W7 shows that cost does not grow with history once it is pruned: a
// database gets plan.Pruned finished single-task runs (each with its task
// run, a published outbox row and four history rows) by generate_series,
// backdated two to three days, and the current tree's pruner (`ffctl
// daemon scheduler --retain-succeeded 1d --retain-outbox 1d`) deletes them
// all; after a plain VACUUM ANALYZE (what autovacuum would do, not VACUUM
// FULL) the job runs W2 and the dashboard's refresh (ffdash) on a clone of
// it and on a clone of a fresh database, alternated three times, and
// reports the ratio of the medians, pruned ÷ fresh. The
// tree before issue 15 has no pruner: the current column only.
const (
	metricPrunedRunsRatio = "pruned_runs_per_s_ratio" // W7: W2 runs/s pruned ÷ fresh
	metricPrunedP50Ratio  = "pruned_p50_ratio"        // W7: W2 p50 pruned ÷ fresh
	metricPrunedDashRatio = "pruned_dash_ratio"       // W7: dashboard refresh ms pruned ÷ fresh
	metricDashFreshMS     = "dash_fresh_ms"           // W7: one dashboard refresh, fresh database, ms
	metricDashPrunedMS    = "dash_pruned_ms"          // W7: the same after the pruning
	metricPruneS          = "prune_s"                 // W7: pruner start → every backdated run gone, s
	metricPrunedRowsPerS  = "pruned_runs_per_s"       // W7: runs deleted per second by the pruner
	varPruned             = "after pruning"
	dashRefreshes         = 200
	// w7Pairs is how many times W7 alternates fresh and pruned.
	w7Pairs = 3
)

// qBackdatedHistory inserts runs $2+1..$3 of workflow $1 (the benchmark's
// one-task workflow): each SUCCEEDED two to three days ago (database
// clock), with its task run, a published outbox row and four history rows.
const qBackdatedHistory = `
WITH r AS (
    INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, created_at, started_at, finished_at)
    SELECT gen_random_uuid(), w.id, w.name, w.version, 'SUCCEEDED', ts, ts, ts
      FROM workflows w,
           LATERAL (SELECT now() - interval '2 days' - (g::float8 / $3::int) * interval '1 day' AS ts FROM generate_series($2::int + 1, $3::int) g) x
     WHERE w.name = $1 AND w.version = (SELECT max(version) FROM workflows WHERE name = $1)
 RETURNING id, finished_at
), t AS (
    INSERT INTO task_runs (id, run_id, task_name, handler, state, attempt, max_attempts, fencing_token, started_at, finished_at, result)
    SELECT gen_random_uuid(), r.id, 'noop', 'noop', 'SUCCEEDED', 1, 3, 1, r.finished_at, r.finished_at, '{}'
      FROM r
 RETURNING id, run_id, finished_at
), o AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload, created_at, published_at)
    SELECT id, 1, '{}', finished_at, finished_at FROM t
)
INSERT INTO task_events (task_run_id, run_id, at, from_state, to_state, attempt, fencing_token, actor)
SELECT t.id, t.run_id, t.finished_at, s.f, s.tt, 1, 1, 'bench'
  FROM t, (VALUES (NULL, 'PENDING'), ('PENDING', 'READY'), ('READY', 'RUNNING'), ('RUNNING', 'SUCCEEDED')) s (f, tt)`

// buildPruned creates prunedDB: baseDB with n backdated finished runs,
// pruned away by the pruner, vacuumed (not FULL) and checkpointed. It
// returns the pruner's time and rate.
func (f *flowforge) buildPruned(ctx context.Context, n int) (map[string]float64, error) {
	start := time.Now()
	if err := f.env.pg.createDB(ctx, f.prunedDB(), f.baseDB); err != nil {
		return nil, err
	}
	pool, err := f.env.pg.pool(ctx, f.prunedDB())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	const batch = 100_000
	for lo := 0; lo < n; lo += batch {
		if _, err := pool.Exec(ctx, qBackdatedHistory, wfOne, lo, min(lo+batch, n)); err != nil {
			return nil, fmt.Errorf("backdated history: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	f.env.log("  %s: %d backdated finished task runs inserted in %.0f s", f.build.Label, n, time.Since(start).Seconds())
	cmd := exec.Command(f.build.FFCTL, "daemon", "scheduler")
	cmd.Env = ffctlEnv("FLOWFORGE_DATABASE_URL="+f.env.pg.URL(f.prunedDB(), "postgres"), "FLOWFORGE_HEALTH_ADDR=",
		"FLOWFORGE_RETAIN_SUCCEEDED=1d", "FLOWFORGE_RETAIN_OUTBOX=1d", "FLOWFORGE_PRUNE_INTERVAL=1s")
	pruneStart := time.Now()
	c, err := startChild("pruner", cmd, filepath.Join(f.dir, f.prunedDB()+"-scheduler.log"))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Minute)
	for {
		var left int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM workflow_runs LIMIT 1) x`).Scan(&left); err != nil {
			c.stop(syscall.SIGTERM, 30*time.Second)
			return nil, fmt.Errorf("pruning: %w", err)
		}
		if left == 0 {
			break
		}
		if c.exited() || time.Now().After(deadline) {
			c.stop(syscall.SIGTERM, 30*time.Second)
			return nil, fmt.Errorf("pruning: runs left after %.0f s (pruner exited: %v; log %s)", time.Since(pruneStart).Seconds(), c.exited(), c.log)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
	}
	secs := time.Since(pruneStart).Seconds()
	c.stop(syscall.SIGTERM, 30*time.Second)
	pool.Close()
	for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if err := execIn(ctx, f.env, f.prunedDB(), q); err != nil {
			return nil, err
		}
	}
	f.env.log("  %s: pruned %d runs in %.0f s", f.build.Label, n, secs)
	return map[string]float64{metricPruneS: secs, metricPrunedRowsPerS: float64(n) / secs}, nil
}

// prunedDB is the template of W7's pruned databases.
func (f *flowforge) prunedDB() string { return f.baseDB[:len(f.baseDB)-len("_base")] + "_pruned" }

// afterPruning is W7's job: W2 and the dashboard's refresh on clones of
// the fresh template and of the pruned one, alternated w7Pairs times (a
// drift of the shared machine hits both alike), with the ratios of the
// medians.
func (f *flowforge) afterPruning(ctx context.Context, mode string, dur time.Duration, ffdash string, pruneStats map[string]float64) (sample, error) {
	s := sample{Metrics: map[string]float64{}}
	for k, v := range pruneStats {
		s.Metrics[k] = v
	}
	var runs, p50, dash [2][]float64
	for range w7Pairs {
		for i, template := range []string{f.baseDB, f.prunedDB()} {
			w, err := f.continuous(ctx, "W7", template, mode, wfOne, dur)
			if err != nil {
				return s, err
			}
			runs[i], p50[i] = append(runs[i], w.Metrics[metricRunsPerS]), append(p50[i], w.Metrics[metricP50])
			d, err := f.dashRefresh(ctx, template, ffdash)
			if err != nil {
				return s, err
			}
			dash[i] = append(dash[i], d)
		}
	}
	med := func(xs []float64) float64 { return percentile(xs, 50) }
	s.Metrics[metricRunsPerS] = med(runs[1])
	s.Metrics[metricP50] = med(p50[1])
	s.Metrics[metricPrunedRunsRatio] = med(runs[1]) / med(runs[0])
	s.Metrics[metricPrunedP50Ratio] = med(p50[1]) / med(p50[0])
	s.Metrics[metricDashFreshMS], s.Metrics[metricDashPrunedMS] = med(dash[0]), med(dash[1])
	s.Metrics[metricPrunedDashRatio] = med(dash[1]) / med(dash[0])
	return s, nil
}

// dashRefresh times dashRefreshes dashboard refreshes on a clone of
// template (ffdash), in ms per refresh.
func (f *flowforge) dashRefresh(ctx context.Context, template, ffdash string) (float64, error) {
	db, err := f.freshDB(ctx, template)
	if err != nil {
		return 0, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	out, err := exec.CommandContext(ctx, ffdash, "-db", f.env.pg.URL(db, "postgres"), "-n", strconv.Itoa(dashRefreshes)).Output()
	if err != nil {
		return 0, fmt.Errorf("ffdash: %w", err)
	}
	var r struct {
		MS float64 `json:"ms_per_refresh"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("ffdash output %q: %w", out, err)
	}
	return r.MS, nil
}

// buildDash builds ffdash inside tree (the current one) into outDir, as
// buildTree builds fftrigger.
func buildDash(ctx context.Context, tree, src, outDir string) (string, error) {
	bin := filepath.Join(outDir, "ffdash")
	overlay := map[string]map[string]string{"Replace": {filepath.Join(tree, "ffbenchdash", "main.go"): src}}
	ov := filepath.Join(outDir, "overlay-dash.json")
	data, _ := json.Marshal(overlay)
	if err := os.WriteFile(ov, data, 0o644); err != nil {
		return "", fmt.Errorf("build ffdash: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "ffdash", "-overlay", ov, "-o", bin, "./ffbenchdash")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build ffdash: %w\n%s", err, out)
	}
	return bin, nil
}

// retentionRows are W7's lines of the table (the current column only).
func retentionRows(p plan) []rowSpec {
	cell := func(metric string) map[string]pick {
		return map[string]pick{sysFF: pickMetric(metric, "W7", varPruned)}
	}
	na := map[string]string{sysFFBefore: "no pruner before issue 15", sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	n := fmt.Sprintf("%d", p.Pruned)
	return []rowSpec{
		{Label: "W7 pruner: " + n + " backdated runs deleted, runs/s", Metric: metricPrunedRowsPerS, HigherBetter: true, Cells: cell(metricPrunedRowsPerS), NA: na},
		{Label: "W7 after pruning: W2 runs/s ÷ fresh", Metric: metricPrunedRunsRatio, HigherBetter: true, Cells: cell(metricPrunedRunsRatio), NA: na},
		{Label: "W7 after pruning: W2 p50 ÷ fresh", Metric: metricPrunedP50Ratio, Cells: cell(metricPrunedP50Ratio), NA: na},
		{Label: "W7 after pruning: dashboard refresh ÷ fresh", Metric: metricPrunedDashRatio, Cells: cell(metricPrunedDashRatio), NA: na},
	}
}
