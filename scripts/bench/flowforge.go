package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Workflow names the FlowForge workloads trigger (see workflowFiles).
const (
	wfOne   = "bench-one"   // one noop task: W1, W2, W5
	wfChain = "bench-chain" // chainSteps noop tasks in a line: W3
	wfFan   = "bench-fan"   // fanWidth parallel noop tasks and a join: W4
	// wfForEach is a for_each noop task over forEachWidth elements and a
	// join: W4e (trees with for_each only, ffBuild.HasForEach).
	wfForEach = "bench-foreach"
)

// chainSteps is W3's chain length; fanWidth W4's parallel tasks. The join
// makes fanWidth+1 tasks, and core.MaxTasks (1000) caps a workflow, so the
// fan-out is 999 wide rather than 1,000.
const (
	chainSteps = 10
	fanWidth   = 999
)

// forEachWidth is W4e's elements: a for_each's elements are task runs the
// scheduler makes, not tasks the file declares, so core.MaxTasks does not
// cap them (max_items does, 10,000 by default).
const forEachWidth = 1000

// workflowFiles returns the YAML of the benchmark's workflows by name;
// with forEach, W4e's too (a tree without for_each refuses its file); with
// flow, the flow variants' (a tree without flow control refuses theirs);
// with taskLogs, the task-log variant's (an older noop refuses log_lines).
func workflowFiles(forEach, flow, taskLogs bool) map[string]string {
	var chain, fan strings.Builder
	fmt.Fprintf(&chain, "name: %s\ntasks:\n", wfChain)
	for i := 1; i <= chainSteps; i++ {
		fmt.Fprintf(&chain, "  - {name: s%d, handler: noop", i)
		if i > 1 {
			fmt.Fprintf(&chain, ", depends_on: [s%d]", i-1)
		}
		chain.WriteString("}\n")
	}
	fmt.Fprintf(&fan, "name: %s\ntasks:\n", wfFan)
	deps := make([]string, fanWidth)
	for i := range fanWidth {
		deps[i] = fmt.Sprintf("p%d", i)
		fmt.Fprintf(&fan, "  - {name: p%d, handler: noop}\n", i)
	}
	fmt.Fprintf(&fan, "  - {name: join, handler: noop, depends_on: [%s]}\n", strings.Join(deps, ", "))
	files := map[string]string{
		wfOne:   fmt.Sprintf("name: %s\ntasks:\n  - {name: t, handler: noop}\n", wfOne),
		wfChain: chain.String(),
		wfFan:   fan.String(),
	}
	if forEach {
		files[wfForEach] = forEachFile()
	}
	if flow {
		for name, src := range flowFiles() {
			files[name] = src
		}
	}
	if taskLogs {
		files[wfLog] = logFile()
	}
	return files
}

// forEachFile is W4e's workflow: split, a noop for_each task over a
// literal list of forEachWidth integers (evaluated when the scheduler
// expands it, as a list from params or an upstream result would be), and
// join below it.
func forEachFile() string {
	items := make([]string, forEachWidth)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	return fmt.Sprintf("name: %s\ntasks:\n  - {name: split, handler: noop, for_each: \"[%s]\"}\n  - {name: join, handler: noop, depends_on: [split]}\n",
		wfForEach, strings.Join(items, ", "))
}

// flowforge is one FlowForge build under test on the private servers.
type flowforge struct {
	build   ffBuild
	env     *benchEnv
	dir     string // logs and workflow files
	baseDB  string // migrated, workflows applied: template of every fresh database
	histDB  string // baseDB plus the W5 history: template of every W5 database
	seq     int    // numbers databases and queues
	baseURL string
}

func newFlowForge(b ffBuild, env *benchEnv) *flowforge {
	slug := strings.ToLower(strings.NewReplacer(" ", "_", "+", "_").Replace(b.Label))
	return &flowforge{build: b, env: env, dir: filepath.Join(env.workDir, slug),
		baseDB: slug + "_base", histDB: slug + "_hist"}
}

// setup creates the template database: migrated with this build's ffctl,
// the benchmark's workflows applied.
func (f *flowforge) setup(ctx context.Context) error {
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", f.build.Label, err)
	}
	if err := f.env.pg.createDB(ctx, f.baseDB, ""); err != nil {
		return err
	}
	f.baseURL = f.env.pg.URL(f.baseDB, "postgres")
	if _, err := f.ffctl(ctx, f.baseURL, "migrate"); err != nil {
		return err
	}
	for name, yaml := range workflowFiles(f.build.HasForEach, f.build.HasFlow, f.build.HasTaskLogs) {
		path := filepath.Join(f.dir, name+".yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			return fmt.Errorf("%s: %w", f.build.Label, err)
		}
		if _, err := f.ffctl(ctx, f.baseURL, "workflow", "apply", "-f", path); err != nil {
			return err
		}
	}
	return nil
}

// ffctl runs a one-shot ffctl command against database url.
func (f *flowforge) ffctl(ctx context.Context, url string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, f.build.FFCTL, args...)
	cmd.Env = ffctlEnv("FLOWFORGE_DATABASE_URL="+url, "FLOWFORGE_AMQP_URL="+f.env.mq.URL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: ffctl %s: %w\n%s", f.build.Label, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ffctlEnv is the driver's environment without its FLOWFORGE_* variables
// (a setting left in the shell must not turn a "defaults" variant into a
// tuned one), plus kv.
func ffctlEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "FLOWFORGE_") {
			env = append(env, e)
		}
	}
	return append(env, kv...)
}

// workerDefaults reads the worker's default --concurrency from this build's
// `ffctl daemon worker --help`, so that the report says what "defaults"
// meant for each tree.
func (f *flowforge) workerDefaults(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, f.build.FFCTL, "daemon", "worker", "--help").CombinedOutput()
	if err != nil {
		return "worker --concurrency unknown (ffctl daemon worker --help: " + firstLine(err.Error()) + ")"
	}
	return parseConcurrencyDefault(out)
}

// parseConcurrencyDefault finds the --concurrency flag's line of `ffctl
// daemon worker --help` (urfave/cli prints "--concurrency value  … (default:
// N)") and says "worker --concurrency N", or that the help does not say.
func parseConcurrencyDefault(help []byte) string {
	m := regexp.MustCompile(`--concurrency value[^\n]*\(default: (\d+)\)`).FindSubmatch(help)
	if m == nil {
		return "worker --concurrency unknown (ffctl daemon worker --help does not say)"
	}
	return "worker --concurrency " + string(m[1])
}

// freshDB creates a new database cloned from template and returns its name.
func (f *flowforge) freshDB(ctx context.Context, template string) (string, error) {
	f.seq++
	name := fmt.Sprintf("%s_%d", strings.TrimSuffix(template, "_base"), f.seq)
	if err := f.env.pg.createDB(ctx, name, template); err != nil {
		return "", err
	}
	return name, nil
}

// daemons are the FlowForge processes of one workload.
type daemons struct {
	procs []*child
	queue string
}

// daemonRoles is what each mode starts: "all" one process, "separate" the
// three roles as processes of their own, modeSeparate64 the same with
// workerConcurrency's worker.
var daemonRoles = map[string][]string{
	"all":          {"all"},
	"separate":     {"scheduler", "publisher", "worker"},
	modeSeparate64: {"scheduler", "publisher", "worker"},
	modeAll64:      {"all"},
	modeAllStream:  {"all"},
	modeAllTraced:  {"all"},
}

// modeSeparate64 is W1's layout for the worker's peak RSS (issue 14's
// bound: 50 MiB at concurrency 64): separate daemons, the worker with
// --concurrency 64 (FLOWFORGE_CONCURRENCY, which the before column knows too).
const modeSeparate64 = "separate c64"

// modeAll64 is W2's second layout: `daemon all` with the worker at
// --concurrency 64, the setting closest to River's MaxWorkers 2000 that a
// 2-core machine can use (at the default 4 the worker's slots, not the
// database, bound a burn-down and a continuous load).
const modeAll64 = "all c64"

// workerConcurrency is the worker's --concurrency by mode; a mode not
// listed runs the default.
var workerConcurrency = map[string]int{modeSeparate64: 64, modeAll64: 64}

// startDaemons starts the daemons of mode on database db with a queue of
// their own (deleted when they stop), with the built-in handlers' defaults.
func (f *flowforge) startDaemons(db, mode string) (*daemons, error) {
	d := &daemons{queue: fmt.Sprintf("ffbench.%s", db)}
	env := ffctlEnv(
		"FLOWFORGE_DATABASE_URL="+f.env.pg.URL(db, "postgres"),
		"FLOWFORGE_AMQP_URL="+f.env.mq.URL(),
		"FLOWFORGE_QUEUE="+d.queue,
		"FLOWFORGE_HEALTH_ADDR=")
	for _, role := range daemonRoles[mode] {
		cmd := exec.Command(f.build.FFCTL, "daemon", role)
		cmd.Env = env
		if c := workerConcurrency[mode]; c > 0 && role == "worker" {
			cmd.Env = append(slices.Clip(env), fmt.Sprintf("FLOWFORGE_CONCURRENCY=%d", c))
		}
		cmd.Env = append(slices.Clip(cmd.Env), obsEnv[mode]...)
		if mode == modeAllTraced {
			// The console exporter writes to standard output: measured
			// without the cost of a log file (the log keeps stderr).
			null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				d.stop()
				return nil, err
			}
			defer null.Close()
			cmd.Stdout = null
		}
		c, err := startChild(role, cmd, filepath.Join(f.dir, db+"-"+role+".log"))
		if err != nil {
			d.stop()
			return nil, err
		}
		d.procs = append(d.procs, c)
	}
	return d, nil
}

// daemonUsage is what each daemon process spent: CPU seconds and peak RSS.
type daemonUsage struct {
	CPUSeconds float64 `json:"cpu_s"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
}

// stop reads each daemon's peak RSS, sends SIGTERM to every daemon and
// waits (30 s, then SIGKILL); it returns each one's usage by role.
func (d *daemons) stop() map[string]daemonUsage {
	out := map[string]daemonUsage{}
	rss := map[string]int64{}
	for _, c := range d.procs {
		rss[c.name] = c.peakRSS()
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range d.procs {
		c.stop(syscall.SIGTERM, 30*time.Second)
		if cpu, err := c.cpuSeconds(); err == nil {
			out[c.name] = daemonUsage{CPUSeconds: cpu, PeakRSSMB: float64(rss[c.name]) / (1 << 20)}
		}
	}
	return out
}

// failed reports a daemon that exited while it should run, with its log.
func (d *daemons) failed() error {
	for _, c := range d.procs {
		if c.exited() {
			return fmt.Errorf("daemon %s exited: %s", c.name, c.tail(15))
		}
	}
	return nil
}

// trigger runs this build's fftrigger on database db with the given flags.
func (f *flowforge) trigger(ctx context.Context, db string, args ...string) (triggerResult, error) {
	var res triggerResult
	base := []string{"-db", f.env.pg.URL(db, "postgres"), "-poll-db", f.env.pg.URL(db, observerRole)}
	cmd := exec.CommandContext(ctx, f.build.Trigger, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("%s: fftrigger %s: %w: %s", f.build.Label, strings.Join(args, " "), err, stderr.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.cpu = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("%s: fftrigger output %q: %w", f.build.Label, out, err)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%s: fftrigger: %d triggers failed, first: %s", f.build.Label, res.Errors, res.FirstError)
	}
	return res, nil
}

// triggerResult is fftrigger's output.
type triggerResult struct {
	Triggered  int64   `json:"triggered"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	FirstError string  `json:"first_error"`
	// LagsMS is -mode open's lag of each trigger behind its schedule.
	LagsMS []float64 `json:"lags_ms"`
	// LatMS is -mode tx's and many's wall time of each timed call (a
	// transaction begin → commit, a batch), in ms; Seconds is then the
	// timed calls' span.
	LatMS []float64 `json:"lat_ms"`
	cpu   float64   // CPU seconds of the fftrigger process
}

// ffRun is a database with daemons running on it, warmed up: one run has
// gone through every daemon.
type ffRun struct {
	f    *flowforge
	d    *daemons
	pool *pgxpool.Pool
	db   string
}

func (f *flowforge) startRun(ctx context.Context, db, mode string) (*ffRun, error) {
	pool, err := f.env.pg.pool(ctx, db)
	if err != nil {
		return nil, err
	}
	d, err := f.startDaemons(db, mode)
	if err != nil {
		pool.Close()
		return nil, err
	}
	r := &ffRun{f: f, d: d, pool: pool, db: db}
	if _, err := f.trigger(ctx, db, "-mode", "bulk", "-n", "8", "-workflow", wfOne); err != nil {
		r.close(ctx)
		return nil, err
	}
	if err := ffWaitSettled(ctx, pool, 2*time.Minute, d.failed); err != nil {
		r.close(ctx)
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return r, nil
}

// onFreshRun runs fn against the daemons of mode, warmed up (startRun), on
// a fresh clone of template; then it stops them and drops the database.
func (f *flowforge) onFreshRun(ctx context.Context, template, mode string, fn func(run *ffRun) (sample, error)) (sample, error) {
	db, err := f.freshDB(ctx, template)
	if err != nil {
		return sample{}, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	run, err := f.startRun(ctx, db, mode)
	if err != nil {
		return sample{}, err
	}
	defer run.close(ctx)
	return fn(run)
}

// close stops the daemons, deletes their queues and returns their usage.
func (r *ffRun) close(ctx context.Context) map[string]daemonUsage {
	u := r.d.stop()
	r.f.env.deleteQueues(ctx, r.d.queue)
	r.pool.Close()
	return u
}
