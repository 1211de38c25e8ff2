package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func runCommand(env *Env) *cli.Command {
	waitFlags := []cli.Flag{
		&cli.DurationFlag{Name: "timeout", Usage: "with waiting: give up after this long (exit 1; the run is not touched); 0 waits forever"},
	}
	return &cli.Command{
		Name:  "run",
		Usage: "trigger, list, show, wait for and cancel workflow runs",
		Subcommands: []*cli.Command{
			{
				Name:      "trigger",
				Usage:     "start a run of a workflow",
				UsageText: "ffctl run trigger NAME [--param k=v]... [--params-file F] [--idempotency-key K] [--wait [--timeout D]] [-o json]\n\nExample:\n  ffctl run trigger wordcount --param corpus=$PWD/demo/corpus --wait --timeout 5m",
				Flags: append([]cli.Flag{
					&cli.StringSliceFlag{Name: "param", Aliases: []string{"p"}, Usage: "run param key=value (a string); repeatable; overrides --params-file"},
					&cli.StringFlag{Name: "params-file", Usage: "JSON object file of run params; - reads standard input"},
					&cli.StringFlag{Name: "idempotency-key", Usage: "de-duplicate triggers: the same key and params return the existing run"},
					&cli.IntFlag{Name: "version", Usage: "workflow version (default newest)"},
					&cli.BoolFlag{Name: "wait", Usage: "wait until the run ends; exit 0 only if it SUCCEEDED"},
					outputFlag(),
				}, waitFlags...),
				Action: func(c *cli.Context) error { return runTrigger(c, env) },
			},
			{
				Name:      "list",
				Usage:     "list runs, newest first",
				UsageText: "ffctl run list [--workflow W] [--state S] [--limit N] [-o json]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workflow", Usage: "only runs of this workflow"},
					&cli.StringFlag{Name: "state", Usage: "only runs in this state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)"},
					&cli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return runList(c, env) },
			},
			{
				Name:      "show",
				Usage:     "show a run and its tasks",
				UsageText: "ffctl run show RUN_ID [-o json]",
				Flags:     []cli.Flag{outputFlag()},
				Action:    func(c *cli.Context) error { return runShow(c, env) },
			},
			{
				Name:      "wait",
				Usage:     "wait until a run ends; exit 0 only if it SUCCEEDED",
				UsageText: "ffctl run wait RUN_ID [--timeout D] [-o json]",
				Flags:     append([]cli.Flag{outputFlag()}, waitFlags...),
				Action:    func(c *cli.Context) error { return runWaitCmd(c, env) },
			},
			{
				Name:      "cancel",
				Usage:     "cancel a run: unstarted tasks are cancelled, running ones are signalled",
				UsageText: "ffctl run cancel RUN_ID [--reason R]\n\nExample:\n  ffctl run cancel 0b7c...e1 --reason 'wrong input'",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (audited)", Value: "cancelled by operator"}, outputFlag()},
				Action:    func(c *cli.Context) error { return runCancel(c, env) },
			},
		},
	}
}

// parseID parses a UUID argument; a malformed one is a usage error.
func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(strings.TrimSpace(s))
	if err != nil {
		return uuid.Nil, usageError("malformed %s id %q: want a UUID such as 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10", what, s)
	}
	return id, nil
}

func oneID(c *cli.Context, what string) (uuid.UUID, error) {
	if c.NArg() != 1 {
		return uuid.Nil, usageError("expected exactly one %s id", what)
	}
	return parseID(what, c.Args().First())
}

// buildParams merges --params-file and --param into one JSON object.
func buildParams(c *cli.Context, env *Env) (json.RawMessage, error) {
	params := map[string]any{}
	if f := c.String("params-file"); f != "" {
		data, err := readInput(env, f)
		if err != nil {
			return nil, err
		}
		if err := core.ValidateParams(data); err != nil {
			return nil, usageError("--params-file %s: %v", f, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if err := dec.Decode(&params); err != nil {
			return nil, usageError("--params-file %s: %v", f, err)
		}
	}
	for _, kv := range c.StringSlice("param") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--param %q: want key=value", kv)
		}
		params[k] = v
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, usageError("params: %v", err)
	}
	if err := core.ValidateParams(raw); err != nil {
		return nil, usageError("%v", err)
	}
	return raw, nil
}

func runTrigger(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError("run trigger takes one workflow name")
	}
	name := c.Args().First()
	if err := core.ValidateName("workflow", name); err != nil {
		return usageError("%v", err)
	}
	params, err := buildParams(c, env)
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.Trigger(c.Context, store.TriggerRequest{Workflow: name, Version: c.Int("version"), Params: params, IdempotencyKey: c.String("idempotency-key"), Actor: actor()})
	switch {
	case errors.Is(err, core.ErrBadParams):
		return usageError("%v", err)
	case err != nil:
		return failure(err)
	}
	if res.Existing {
		fmt.Fprintf(env.Stderr, "idempotency key %q already used: returning existing run %s\n", c.String("idempotency-key"), res.RunID)
	}
	if !c.Bool("wait") {
		if format == "json" {
			run, err := s.GetRun(c.Context, res.RunID)
			if err != nil {
				return failure(err)
			}
			return writeJSON(env.Stdout, runJSON{Run: run, Existing: res.Existing})
		}
		fmt.Fprintf(env.Stdout, "%s\n", res.RunID)
		return nil
	}
	return waitAndReport(c, env, s, res.RunID, format)
}

// runJSON is the run object of -o json: the store.Run fields plus
// "existing" for triggers.
type runJSON struct {
	store.Run
	Existing bool `json:"existing,omitempty"`
}

func runWaitCmd(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	id, err := oneID(c, "run")
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	return waitAndReport(c, env, s, id, format)
}

// waitAndReport polls the run until its state is terminal or --timeout
// passes, showing progress on a terminal, then prints it. Exit 0 only when
// it SUCCEEDED.
func waitAndReport(c *cli.Context, env *Env, s *store.Store, id uuid.UUID, format string) error {
	ctx := c.Context
	if t := c.Duration("timeout"); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	live := isTerminal(env.Stderr)
	interval := 50 * time.Millisecond
	var run store.Run
	for {
		r, err := s.GetRun(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, store.ErrNotFound) {
				return failure(err)
			}
			// A transient database error: keep waiting.
		} else {
			run = r
			if live {
				fmt.Fprintf(env.Stderr, "\r\033[K%s", progressLine(run))
			}
			if core.RunState(run.State).Terminal() {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
		if ctx.Err() != nil {
			break
		}
		if interval < 500*time.Millisecond {
			interval += 25 * time.Millisecond
		}
	}
	if live {
		fmt.Fprint(env.Stderr, "\r\033[K")
	}
	if ctx.Err() != nil && !core.RunState(run.State).Terminal() {
		return failure(fmt.Errorf("timed out after %s waiting for run %s (state %s, %d/%d tasks done); the run was not touched",
			c.Duration("timeout"), id, run.State, run.TasksDone, run.TasksTotal))
	}
	if err := printRun(env.Stdout, run, format); err != nil {
		return err
	}
	if run.State != string(core.RunSucceeded) {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("run %s ended %s", id, run.State)}
	}
	return nil
}

func progressLine(r store.Run) string {
	counts := map[string]int{}
	for _, t := range r.Tasks {
		counts[t.State]++
	}
	var parts []string
	for _, st := range core.TaskStates {
		if n := counts[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, n))
		}
	}
	return fmt.Sprintf("run %s: %s, %d/%d tasks done (%s)", r.ID.String()[:8], r.State, r.TasksDone, r.TasksTotal, strings.Join(parts, ", "))
}

func runList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	state := strings.ToUpper(c.String("state"))
	if state != "" && !core.RunState(state).Valid() {
		return usageError("--state %q: want one of %v", c.String("state"), core.RunStates)
	}
	if c.Int("limit") < 1 || c.Int("limit") > 10000 {
		return usageError("--limit must be between 1 and 10000")
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	runs, err := s.ListRuns(c.Context, store.RunFilter{Workflow: c.String("workflow"), State: state, Limit: c.Int("limit")})
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		if runs == nil {
			runs = []store.Run{}
		}
		return writeJSON(env.Stdout, runs)
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "RUN ID\tWORKFLOW\tSTATE\tTASKS\tCREATED\tFINISHED")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, r.Workflow, r.State, r.TasksDone, r.TasksTotal, fmtTime(&r.CreatedAt), fmtTime(r.FinishedAt))
	}
	return tw.Flush()
}

func runShow(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	id, err := oneID(c, "run")
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	run, err := s.GetRun(c.Context, id)
	if err != nil {
		return failure(err)
	}
	return printRun(env.Stdout, run, format)
}

// printRun writes a run with its task tree (in DAG order, indented by
// depth).
func printRun(w io.Writer, run store.Run, format string) error {
	if format == "json" {
		return writeJSON(w, runJSON{Run: run})
	}
	fmt.Fprintf(w, "run %s\n  workflow  %s (version %d)\n  state     %s\n  created   %s\n  finished  %s\n",
		run.ID, run.Workflow, run.WorkflowVersion, run.State, fmtTime(&run.CreatedAt), fmtTime(run.FinishedAt))
	if run.CancelRequestedAt != nil {
		fmt.Fprintf(w, "  cancel requested %s\n", fmtTime(run.CancelRequestedAt))
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "TASK\tSTATE\tATTEMPT\tWORKER\tSTARTED\tFINISHED\tERROR")
	for _, t := range dagOrder(run.Tasks) {
		worker := "-"
		if t.task.WorkerID != nil {
			worker = sanitizeCell(*t.task.WorkerID)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", strings.Repeat("  ", t.depth), sanitizeCell(t.task.Name), t.task.State,
			t.task.Attempt, t.task.MaxAttempts, worker, fmtTime(t.task.StartedAt), fmtTime(t.task.FinishedAt), firstLine(t.task.Error, 60))
	}
	return tw.Flush()
}

type orderedTask struct {
	task  store.TaskRun
	depth int
}

// dagOrder sorts tasks by depth in the DAG, then by name.
func dagOrder(tasks []store.TaskRun) []orderedTask {
	deps := make(map[string][]string, len(tasks))
	for _, t := range tasks {
		var d []string
		_ = json.Unmarshal(t.DependsOn, &d)
		deps[t.Name] = d
	}
	depth := core.Depths(deps)
	out := make([]orderedTask, len(tasks))
	for i, t := range tasks {
		out[i] = orderedTask{task: t, depth: depth[t.Name]}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].depth != out[j].depth {
			return out[i].depth < out[j].depth
		}
		return out[i].task.Name < out[j].task.Name
	})
	return out
}

func runCancel(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	id, err := oneID(c, "run")
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.CancelRun(c.Context, id, actor(), c.String("reason"))
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{"run_id": id, "cancelled": true, "tasks_cancelled": res.TasksCancelled})
	}
	fmt.Fprintf(env.Stdout, "run %s: cancellation requested; %d unstarted tasks cancelled, running tasks are being signalled\n", id, res.TasksCancelled)
	return nil
}
