// Command bench is FlowForge's benchmark driver (make bench, make
// bench-quick): FlowForge of the current tree and of a fixed earlier commit,
// River, Celery and the hardware's ceilings (pgbench, raw RabbitMQ), each
// alone, in interleaved rounds, on a private PostgreSQL and a private
// RabbitMQ node it starts and stops itself. It prints a table and writes
// results/<date>-<host>.json. See scripts/bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// beforeCommit is the FlowForge commit of the "before" column: main as it
// stood before issue 21 (the batched hot path's fixes: the claim's and the
// finish's per-(task, token) requests, the finish's split around run
// locks, the targeted pass's SKIP LOCKED, the sweep's new candidate kind).
// Issue 15's before column was 0f73983, issue 14's b860cf5.
const beforeCommit = "a6104d1"

// benchEnv is what every system runs against.
type benchEnv struct {
	plan    plan
	pg      *postgres
	mq      *rabbit
	workDir string // temporary: builds, logs, exported trees
	repo    string // the FlowForge checkout the driver belongs to
	log     func(format string, args ...any)
}

func (e *benchEnv) deleteQueues(_ context.Context, names ...string) {
	if err := e.mq.deleteQueues(names...); err != nil {
		e.log("warning: %v", err)
	}
}

func main() {
	quick := flag.Bool("quick", false, "one round, small sizes (make bench-quick)")
	rounds := flag.Int("rounds", 0, "rounds (default 3, or 1 with -quick)")
	only := flag.String("only", "", "comma-separated systems or workloads to run (development aid), e.g. river,W1")
	out := flag.String("out", "", "results file (default results/<date>-<host>.json; with -quick under the work directory)")
	keep := flag.Bool("keep", false, "keep the work directory (logs) after the run")
	jobs := flag.String("jobs", "", "regular expression a job's name (workload · variant) must match to run (development aid), e.g. -only flowforge,W2 -jobs '^W2 · daemon all(, transition stream)?$'")
	flag.Parse()
	p, err := planFor(*quick).withJobs(*jobs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *rounds > 0 {
		p.Rounds = *rounds
	}
	p.Only = splitList(*only)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p, *out, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func run(ctx context.Context, p plan, out string, keep bool) error {
	started := time.Now()
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ffbench-")
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	if keep {
		fmt.Printf("work directory (kept): %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	env := &benchEnv{plan: p, workDir: work, repo: repo, log: logf(started)}
	machine := readMachine(ctx)
	env.log("machine: %s; load average at start %s", machine.CPU, machine.LoadStart)
	res, err := runAll(ctx, env)
	if err != nil {
		return err
	}
	machine.LoadEnd = loadAvg()
	res.Machine = machine
	res.Seconds = time.Since(started).Seconds()
	fmt.Print(renderReport(res))
	path, err := writeResults(res, out, repo, p.Quick)
	if err != nil {
		return err
	}
	fmt.Printf("\nresults: %s (%.0f s)\n", path, res.Seconds)
	return nil
}

// logf returns a progress logger that prefixes the elapsed time.
func logf(started time.Time) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
}

// repoRoot is the FlowForge checkout above the driver's directory (the
// driver runs from scripts/bench).
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cli", "ffctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no FlowForge checkout above %s (run from scripts/bench)", wd)
}
