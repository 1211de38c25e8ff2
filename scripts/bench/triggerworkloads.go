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

	"github.com/jackc/pgx/v5/pgxpool"
)

// W6 measures the trigger paths: the ones scripts use — the CLI's cold
// start (one `ffctl run trigger` process per run, against one `psql -c`
// INSERT of a row per process, on the same database in the same job) and
// the bulk trigger (`ffctl run trigger --runs-file`) — and the ones
// applications use (issue 25; the current tree only: the before column
// has no core/client and no HTTP API): client.TriggerTx inside the
// caller's transaction, serially and from w6Loops loops, beside River's
// InsertTx in the same transaction (clientworkloads.go);
// client.TriggerMany, beside River's InsertMany; and `ffctl daemon api`'s
// POST /v1/workflows/{name}/runs, serially and from w6Loops HTTP clients
// (apiworkloads.go). No daemon works the runs: the triggers' cost alone.
const (
	metricCLIP50     = "cli_p50_ms"   // W6 cli: one `ffctl run trigger` process, exec → exit
	metricCLIP99     = "cli_p99_ms"   // W6 cli
	metricPsqlP50    = "psql_p50_ms"  // W6 cli: one `psql -c "insert …"` process, same database
	metricCLIPerPsql = "cli_per_psql" // W6 cli: cli_p50_ms ÷ psql_p50_ms
	// metricCallP50 and metricCallP99 are a W6 load's calls' wall time,
	// in ms: a transaction begin → commit (TriggerTx, InsertTx), a batch
	// (TriggerMany, InsertMany), an HTTP request → its answer read.
	metricCallP50 = "call_p50_ms"
	metricCallP99 = "call_p99_ms"
)

// W6's variants.
const (
	varCLITrigger  = "ffctl run trigger"
	varBulkTrigger = "run trigger --runs-file"
	varTriggerTx   = "TriggerTx serial"
	varTriggerTxN  = "TriggerTx ×8"
	varTriggerMany = "TriggerMany"
	varAPI         = "HTTP API serial"
	varAPIN        = "HTTP API ×8"
	varInsertTx    = "InsertTx serial"
	varInsertTxN   = "InsertTx ×8"
	varInsertMany  = "InsertMany"
)

const (
	w6BatchSize = 500 // FlowForge's --batch-size default; TriggerMany and River's InsertMany batch the same
	w6Loops     = 8   // the concurrent loads' loops (HTTP clients)
	w6Warm      = 3   // untimed calls per loop before a load's clock starts (a batch load: 1)
)

// w6Plan is W6's sizes: the processes of the CLI check, the runs of the
// bulk ones (a multiple of w6BatchSize), the calls of a serial load and
// the window of a concurrent one.
type w6Plan struct {
	CLI, Bulk, Serial int
	Window            time.Duration
}

func w6Sizes(p plan) w6Plan {
	if p.Quick {
		return w6Plan{CLI: 40, Bulk: 20_000, Serial: 200, Window: 2 * time.Second}
	}
	return w6Plan{CLI: 200, Bulk: 100_000, Serial: 1000, Window: 10 * time.Second}
}

// serial and concurrent are w6Plan's two closed loads: Serial calls one at
// a time, and w6Loops loops for Window.
func (w w6Plan) serial() closedLoad { return closedLoad{Loops: 1, Warm: w6Warm, N: w.Serial} }
func (w w6Plan) concurrent() closedLoad {
	return closedLoad{Loops: w6Loops, Warm: w6Warm, Window: w.Window}
}

// w6Job is system's W6 job of variant, the same in every round.
func w6Job(system, variant string, run func(ctx context.Context) (sample, error)) job {
	return job{System: system, Workload: "W6", Variant: variant, run: func(ctx context.Context, _ int) (sample, error) { return run(ctx) }}
}

// triggerJobs are FlowForge's W6 jobs: the CLI's in both columns, the
// client's and the HTTP API's in a tree that has them.
func (s *ffSystem) triggerJobs() []job {
	w := w6Sizes(s.env.plan)
	j := func(variant string, run func(ctx context.Context) (sample, error)) job {
		return w6Job(s.sysKey, variant, run)
	}
	out := []job{
		j(varCLITrigger, func(ctx context.Context) (sample, error) { return s.ff.cliTrigger(ctx, w.CLI) }),
		j(varBulkTrigger, func(ctx context.Context) (sample, error) { return s.ff.bulkTrigger(ctx, w.Bulk) }),
	}
	if s.sysKey != sysFF {
		return out
	}
	return append(out,
		j(varTriggerTx, func(ctx context.Context) (sample, error) { return s.ff.triggerTx(ctx, w.serial()) }),
		j(varTriggerTxN, func(ctx context.Context) (sample, error) { return s.ff.triggerTx(ctx, w.concurrent()) }),
		j(varTriggerMany, func(ctx context.Context) (sample, error) { return s.ff.triggerMany(ctx, w.Bulk) }),
		j(varAPI, func(ctx context.Context) (sample, error) { return s.ff.apiTrigger(ctx, w.serial()) }),
		j(varAPIN, func(ctx context.Context) (sample, error) { return s.ff.apiTrigger(ctx, w.concurrent()) }),
	)
}

// triggerJobs are River's W6 jobs.
func (s *riverSystem) triggerJobs() []job {
	w := w6Sizes(s.env.plan)
	j := func(variant string, run func(ctx context.Context) (sample, error)) job {
		return w6Job(sysRiver, variant, run)
	}
	return []job{
		j(varInsertTx, func(ctx context.Context) (sample, error) { return s.insertTx(ctx, w.serial()) }),
		j(varInsertTxN, func(ctx context.Context) (sample, error) { return s.insertTx(ctx, w.concurrent()) }),
		j(varInsertMany, func(ctx context.Context) (sample, error) { return s.insertMany(ctx, w.Bulk) }),
	}
}

// cliTrigger runs n `ffctl run trigger` processes one after another on a
// fresh database (no daemons: the trigger's cost alone), then n `psql -X -c`
// processes inserting one row each into a table of that database, and
// reports both p50s.
func (f *flowforge) cliTrigger(ctx context.Context, n int) (sample, error) {
	return f.onFreshDB(ctx, func(db string, _ *pgxpool.Pool) (sample, error) { return f.cliTriggerOn(ctx, db, n) })
}

func (f *flowforge) cliTriggerOn(ctx context.Context, db string, n int) (sample, error) {
	s := sample{}
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
		cmd.Env = ffctlEnv("FLOWFORGE_DATABASE_URL=" + url)
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
	return f.onFreshDB(ctx, func(db string, _ *pgxpool.Pool) (sample, error) { return f.bulkTriggerOn(ctx, db, n) })
}

func (f *flowforge) bulkTriggerOn(ctx context.Context, db string, n int) (sample, error) {
	s := sample{}
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
	s.Metrics = map[string]float64{metricN: float64(n), metricTriggerPerS: float64(n) / secs}
	return s, nil
}

// w6Note says how W6 was measured; printed under the table.
func w6Note(p plan) string {
	w := w6Sizes(p)
	return fmt.Sprintf("W6 triggers, each on a fresh database, no daemon working the runs (the triggers' cost alone; the runs are never worked). "+
		"CLI: %d `ffctl run trigger` processes one after another, exec → exit, beside as many `psql -c` INSERTs; the bulk trigger: %d runs from one `ffctl run trigger --runs-file` process (batches of %d; the whole process timed) beside River's InsertMany. "+
		"Application paths (the current tree only: the before column has no core/client and no HTTP API): "+
		"TriggerTx — begin, an INSERT into the application's own table, client.TriggerTx, commit, on a pgxpool (fftrigger -mode tx, the tree's own client, a process of its own), beside River's InsertTx in the same transaction (the driver's pool) — %d transactions one at a time (p50/p99 begin → commit) and %d loops for %v (runs/s, p50); "+
		"TriggerMany — %d runs in batches of %d, one call at a time (runs/s of the calls, p50 per batch) beside River's InsertMany the same way; "+
		"the HTTP API — `ffctl daemon api` on a loopback port with an operator token from `ffctl token create` (authenticated: each request reads its token), POST /v1/workflows/{name}/runs {\"params\":{}} from the driver's HTTP clients (keep-alive), %d requests one at a time and %d clients for %v, request → answer read (River has no HTTP API). "+
		"Every load first makes %d untimed calls per loop (a batch load 1), then checks that the database holds one run (and one order) per call made.",
		w.CLI, w.Bulk, w6BatchSize, w.Serial, w6Loops, w.Window, w.Bulk, w6BatchSize, w.Serial, w6Loops, w.Window, w6Warm)
}

// triggerRows are W6's lines of the table.
func triggerRows() []rowSpec {
	cli := func(metric string) map[string]pick {
		return map[string]pick{sysFF: pickMetric(metric, "W6", varCLITrigger), sysFFBefore: pickMetric(metric, "W6", varCLITrigger)}
	}
	na := map[string]string{sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	rows := []rowSpec{
		{Label: "W6 ffctl run trigger (one process), p50 ms", Metric: metricCLIP50, Cells: cli(metricCLIP50), NA: na},
		{Label: "W6 psql -c INSERT (one process, same run), p50 ms", Metric: metricPsqlP50, Cells: cli(metricPsqlP50), NA: na},
		{Label: "W6 ffctl run trigger p50 ÷ psql p50", Metric: metricCLIPerPsql, Cells: cli(metricCLIPerPsql), NA: na},
		{Label: fmt.Sprintf("W6 bulk trigger --runs-file (River: InsertMany), batches of %d, runs/s", w6BatchSize), Metric: metricTriggerPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W6", varBulkTrigger), sysFFBefore: pickOf("W6", varBulkTrigger), sysRiver: pickOf("W6", varInsertMany)},
			NA:    map[string]string{sysCelery: "-", sysCeiling: "-"}},
	}
	const noClient, noAPI = "no core/client before issue 25", "no HTTP API before issue 25"
	for _, r := range []struct {
		label, metric string
		higher        bool
		ff, river     string
	}{
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), serial, p50 ms begin → commit", metricCallP50, false, varTriggerTx, varInsertTx},
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), serial, p99 ms begin → commit", metricCallP99, false, varTriggerTx, varInsertTx},
		{fmt.Sprintf("W6 TriggerTx in the caller's transaction (River: InsertTx), %d loops, runs/s", w6Loops), metricTriggerPerS, true, varTriggerTxN, varInsertTxN},
		{fmt.Sprintf("W6 TriggerTx in the caller's transaction (River: InsertTx), %d loops, p50 ms", w6Loops), metricCallP50, false, varTriggerTxN, varInsertTxN},
		{fmt.Sprintf("W6 TriggerMany (River: InsertMany), batches of %d, runs/s", w6BatchSize), metricTriggerPerS, true, varTriggerMany, varInsertMany},
		{fmt.Sprintf("W6 TriggerMany (River: InsertMany), p50 ms per batch of %d", w6BatchSize), metricCallP50, false, varTriggerMany, varInsertMany},
		{"W6 HTTP API trigger, serial, p50 ms", metricCallP50, false, varAPI, ""},
		{fmt.Sprintf("W6 HTTP API trigger, %d clients, runs/s", w6Loops), metricTriggerPerS, true, varAPIN, ""},
		{fmt.Sprintf("W6 HTTP API trigger, %d clients, p50 ms", w6Loops), metricCallP50, false, varAPIN, ""},
		{fmt.Sprintf("W6 HTTP API trigger, %d clients, p99 ms", w6Loops), metricCallP99, false, varAPIN, ""},
	} {
		spec := rowSpec{Label: r.label, Metric: r.metric, HigherBetter: r.higher,
			Cells: map[string]pick{sysFF: pickOf("W6", r.ff)},
			NA:    map[string]string{sysFFBefore: noClient, sysCelery: "-", sysCeiling: "-"}}
		if r.river != "" {
			spec.Cells[sysRiver] = pickOf("W6", r.river)
		} else {
			spec.NA[sysFFBefore], spec.NA[sysRiver] = noAPI, "no HTTP API"
		}
		rows = append(rows, spec)
	}
	return rows
}
