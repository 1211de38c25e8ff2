package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
)

// W6 measures the trigger paths scripts use: the CLI's cold start (one
// `ffctl run trigger` process per run, against one `psql -c` INSERT of a
// row per process, on the same database in the same job) and the bulk
// trigger (`ffctl run trigger --runs-file`, against River's InsertMany of
// the same number of jobs in batches of the same size).
const (
	metricCLIP50       = "cli_p50_ms"      // W6 cli: one `ffctl run trigger` process, exec → exit
	metricCLIP99       = "cli_p99_ms"      // W6 cli
	metricPsqlP50      = "psql_p50_ms"     // W6 cli: one `psql -c "insert …"` process, same database
	metricCLIPerPsql   = "cli_per_psql"    // W6 cli: cli_p50_ms ÷ psql_p50_ms
	metricBulkRunsPerS = "bulk_runs_per_s" // W6 bulk: runs (jobs) created per second
	varCLITrigger      = "ffctl run trigger"
	varBulkTrigger     = "run trigger --runs-file"
	varInsertMany      = "InsertMany"
	naBulkBefore       = "no --runs-file before issue 14"
	w6BatchSize        = 500 // FlowForge's --batch-size default; River's InsertMany batches the same
)

// w6Sizes are the processes of the CLI check and the runs of the bulk one.
func w6Sizes(p plan) (cli, bulk int) {
	if p.Quick {
		return 40, 20_000
	}
	return 200, 100_000
}

// triggerJobs are FlowForge's W6 jobs; the tree before issue 14 has no
// bulk trigger, so it gets the CLI job only.
func (s *ffSystem) triggerJobs() []job {
	cli, bulk := w6Sizes(s.env.plan)
	out := []job{{System: s.sysKey, Workload: "W6", Variant: varCLITrigger, run: func(ctx context.Context, _ int) (sample, error) {
		return s.ff.cliTrigger(ctx, cli)
	}}}
	if s.sysKey == sysFF {
		out = append(out, job{System: s.sysKey, Workload: "W6", Variant: varBulkTrigger, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.bulkTrigger(ctx, bulk)
		}})
	}
	return out
}

// triggerJobs is River's W6 job.
func (s *riverSystem) triggerJobs() []job {
	_, bulk := w6Sizes(s.env.plan)
	return []job{{System: sysRiver, Workload: "W6", Variant: varInsertMany, run: func(ctx context.Context, _ int) (sample, error) {
		return s.insertMany(ctx, bulk)
	}}}
}

// cliTrigger runs n `ffctl run trigger` processes one after another on a
// fresh database (no daemons: the trigger's cost alone), then n `psql -X -c`
// processes inserting one row each into a table of that database, and
// reports both p50s.
func (f *flowforge) cliTrigger(ctx context.Context, n int) (sample, error) {
	s := sample{}
	db, err := f.freshDB(ctx, f.baseDB)
	if err != nil {
		return s, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	url := f.env.pg.URL(db, "postgres")
	psql := filepath.Join(f.env.pg.BinDir, "psql")
	if _, err := os.Stat(psql); err != nil {
		psql = "psql"
	}
	if out, err := exec.CommandContext(ctx, psql, "-X", "-q", "-d", url, "-c", "CREATE TABLE t (x int)").CombinedOutput(); err != nil {
		return s, fmt.Errorf("psql: create table: %w\n%s", err, out)
	}
	ff, err := timeProcesses(ctx, n, func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, f.build.FFCTL, "run", "trigger", wfOne)
		cmd.Env = append(os.Environ(), "FLOWFORGE_DATABASE_URL="+url)
		return cmd
	})
	if err != nil {
		return s, fmt.Errorf("%s: %w", f.build.Label, err)
	}
	ps, err := timeProcesses(ctx, n, func() *exec.Cmd {
		return exec.CommandContext(ctx, psql, "-X", "-q", "-d", url, "-c", "insert into t values (1)")
	})
	if err != nil {
		return s, fmt.Errorf("psql: %w", err)
	}
	s.Metrics = map[string]float64{
		metricCLIP50: percentile(ff, 50), metricCLIP99: percentile(ff, 99),
		metricPsqlP50: percentile(ps, 50), metricCLIPerPsql: percentile(ff, 50) / percentile(ps, 50),
	}
	return s, nil
}

// timeProcesses runs n processes from mk one at a time and returns each
// one's wall time (start → exit), in ms. A process that fails is an error.
func timeProcesses(ctx context.Context, n int, mk func() *exec.Cmd) ([]float64, error) {
	out := make([]float64, 0, n)
	for range n {
		cmd := mk()
		t := time.Now()
		b, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, b)
		}
		out = append(out, float64(time.Since(t).Microseconds())/1000)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// bulkTrigger creates n single-task runs with one `ffctl run trigger
// --runs-file` process (batches of w6BatchSize) on a fresh database; the
// clock covers the whole process.
func (f *flowforge) bulkTrigger(ctx context.Context, n int) (sample, error) {
	s := sample{}
	db, err := f.freshDB(ctx, f.baseDB)
	if err != nil {
		return s, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	path := filepath.Join(f.dir, "runs.jsonl")
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"i":` + strconv.Itoa(i) + "}\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return s, err
	}
	t := time.Now()
	out, err := f.ffctl(ctx, f.env.pg.URL(db, "postgres"), "run", "trigger", wfOne, "--runs-file", path, "--batch-size", strconv.Itoa(w6BatchSize))
	secs := time.Since(t).Seconds()
	if err != nil {
		return s, err
	}
	if got := strings.Count(out, "\n"); got != n {
		return s, fmt.Errorf("%s: bulk trigger printed %d run ids, want %d", f.build.Label, got, n)
	}
	s.Metrics = map[string]float64{metricN: float64(n), metricBulkRunsPerS: float64(n) / secs}
	return s, nil
}

// insertMany inserts n no-op jobs with InsertMany in batches of
// w6BatchSize on a fresh database (no client working them).
func (s *riverSystem) insertMany(ctx context.Context, n int) (sample, error) {
	smp := sample{}
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return smp, err
	}
	defer d.close(ctx, s.env)
	params := make([]river.InsertManyParams, 0, w6BatchSize)
	t := time.Now()
	for done := 0; done < n; done += len(params) {
		params = params[:0]
		for range min(w6BatchSize, n-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := d.insert.InsertMany(ctx, params); err != nil {
			return smp, fmt.Errorf("river InsertMany: %w", err)
		}
	}
	secs := time.Since(t).Seconds()
	smp.Metrics = map[string]float64{metricN: float64(n), metricBulkRunsPerS: float64(n) / secs}
	return smp, nil
}

// triggerRows are W6's lines of the table.
func triggerRows() []rowSpec {
	cli := func(metric string) map[string]pick {
		return map[string]pick{sysFF: pickMetric(metric, "W6", varCLITrigger), sysFFBefore: pickMetric(metric, "W6", varCLITrigger)}
	}
	na := map[string]string{sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	return []rowSpec{
		{Label: "W6 ffctl run trigger (one process), p50 ms", Metric: metricCLIP50, Cells: cli(metricCLIP50), NA: na},
		{Label: "W6 psql -c INSERT (one process, same run), p50 ms", Metric: metricPsqlP50, Cells: cli(metricPsqlP50), NA: na},
		{Label: "W6 ffctl run trigger p50 ÷ psql p50", Metric: metricCLIPerPsql, Cells: cli(metricCLIPerPsql), NA: na},
		{Label: fmt.Sprintf("W6 bulk trigger (batches of %d), runs/s", w6BatchSize), Metric: metricBulkRunsPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W6", varBulkTrigger), sysRiver: pickOf("W6", varInsertMany)},
			NA:    map[string]string{sysFFBefore: naBulkBefore, sysCelery: "-", sysCeiling: "-"}},
	}
}
