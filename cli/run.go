package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

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
		Name:      "run",
		Usage:     "trigger, list, show, wait for, cancel and delete workflow runs",
		UsageText: "ffctl run trigger|list|show|wait|cancel|delete [command options] [arguments...]\n\nExample:\n  id=$(ffctl run trigger nightly-report --param date=2026-11-30)\n  ffctl run wait \"$id\" --timeout 10m",
		Subcommands: []*cli.Command{
			{
				Name:  "trigger",
				Usage: "start a run of a workflow",
				UsageText: "ffctl run trigger NAME [--param k=v]... [--params-file F] [--idempotency-key K] [--wait [--timeout D]] [-o json]\n" +
					"ffctl run trigger NAME --runs-file F [--batch-size N] [--from-line L] [-o json]\n\n" +
					"--runs-file creates one run per line of F (a JSON params object; blank lines are skipped).\n" +
					"Every line is checked first: a bad one is a usage error naming it, and nothing is triggered.\n" +
					"Runs are then created --batch-size at a time, one transaction per batch, and each batch's\n" +
					"run ids are printed (one per line) once it committed. Interrupted, it stops between batches\n" +
					"and says how many runs were created and the --from-line that resumes.\n\n" +
					"Example:\n  ffctl run trigger wordcount --param corpus=$PWD/demo/corpus --wait --timeout 5m\n" +
					"  jq -c '{date: .}' dates.json | ffctl run trigger nightly-report --runs-file -",
				Flags: append([]cli.Flag{
					&cli.StringSliceFlag{Name: "param", Aliases: []string{"p"}, Usage: "run param key=value (a string); repeatable; overrides --params-file"},
					&cli.StringFlag{Name: "params-file", Usage: "JSON object file of run params; - reads standard input"},
					&cli.StringFlag{Name: "idempotency-key", Usage: "de-duplicate triggers: the same key and params return the existing run (exit 0); other params are refused (exit 1)"},
					&cli.IntFlag{Name: "version", Usage: "workflow version (default newest)"},
					&cli.BoolFlag{Name: "wait", Usage: "wait until the run ends; exit 0 only if it SUCCEEDED"},
					&cli.StringFlag{Name: "runs-file", Usage: "bulk trigger: one run per line, each a JSON params object (blank lines skipped); - reads standard input; prints one run id per line"},
					&cli.IntFlag{Name: "batch-size", Value: BatchSizeDefault, Usage: "with --runs-file: runs created per transaction"},
					&cli.IntFlag{Name: "from-line", Value: 1, Usage: "with --runs-file: start at this line (resume an interrupted bulk trigger)"},
					outputFlag(),
				}, waitFlags...),
				Action: func(c *cli.Context) error { return runTrigger(c, env) },
			},
			{
				Name:  "list",
				Usage: "list runs, newest first",
				UsageText: "ffctl run list [--workflow W] [--state S] [--limit N] [--before TIME] [-o json]\n\n" +
					"Pages go backwards in time: pass the created_at of the last run of a page as --before\n" +
					"to get the next one.\n\nExample:\n  ffctl run list --workflow nightly-report --state FAILED --limit 20\n" +
					"  ffctl run list --limit 100 --before 2026-11-30T03:00:00.123456Z -o json",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workflow", Usage: "only runs of this workflow"},
					&cli.StringFlag{Name: "state", Usage: "only runs in this state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)"},
					limitFlag(50),
					&cli.StringFlag{Name: "before", Usage: "only runs created before this RFC 3339 time (the created_at of the previous page's last run)"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return runList(c, env) },
			},
			{
				Name:  "show",
				Usage: "show a run and its tasks",
				UsageText: "ffctl run show RUN_ID [-o json]\n\n" +
					"RUN_ID is the whole id or any unique prefix of at least 6 hex digits (as the dashboard shows);\n" +
					"tasks are listed in DAG order (roots first), in the table and in JSON.\n\n" +
					"Example:\n  ffctl run show 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 -o json\n  ffctl run show 0b7c6d2e",
				Flags:  []cli.Flag{outputFlag()},
				Action: func(c *cli.Context) error { return runShow(c, env) },
			},
			{
				Name:  "wait",
				Usage: "wait until a run ends; exit 0 only if it SUCCEEDED",
				UsageText: "ffctl run wait RUN_ID [--timeout D] [-o json]\n\n" +
					"A run has ended when it SUCCEEDED, was CANCELLED, or FAILED with nothing left running.\n" +
					"On a terminal, progress (tasks done/total, states) is shown on standard error.\n" +
					"--timeout ends the wait with exit 1 and leaves the run alone; ctrl-C ends it with exit 130\n" +
					"(\"interrupted; run ID continues\") and leaves the run alone too.\n\n" +
					"Example:\n  ffctl run wait 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 --timeout 10m",
				Flags:  append([]cli.Flag{outputFlag()}, waitFlags...),
				Action: func(c *cli.Context) error { return runWaitCmd(c, env) },
			},
			{
				Name:  "cancel",
				Usage: "cancel a run: unstarted tasks are cancelled, running ones are signalled",
				UsageText: "ffctl run cancel RUN_ID --reason R [-o json]\n\n" +
					"The cancellation is persisted first; unstarted tasks become CANCELLED at once and running\n" +
					"ones are signalled at their next heartbeat. Each cancelled task gets an audit row.\n" +
					"Without --reason a terminal prompts for it; elsewhere a missing reason is a usage error.\n\n" +
					"Example:\n  ffctl run cancel 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 --reason 'wrong input'",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (required: prompted for on a terminal; recorded in the audit trail)"}, outputFlag()},
				Action: func(c *cli.Context) error { return runCancel(c, env) },
			},
			runDeleteCommand(env),
		},
	}
}

// filterFlag returns the value of a filter flag and whether it was given.
// A filter that is given empty (or blank) is a usage error: an empty value
// never means "no filter", so a script whose variable came out empty fails
// instead of selecting everything.
func filterFlag(c *cli.Context, name string) (string, bool, error) {
	if !c.IsSet(name) {
		return "", false, nil
	}
	v := c.String(name)
	if strings.TrimSpace(v) == "" {
		return "", false, usageError("--%s is empty: give a value, or leave the flag out to select everything", name)
	}
	return v, true, nil
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
		if !utf8.ValidString(kv) {
			return nil, usageError("--param %q: not valid UTF-8", kv)
		}
		params[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the size limit applies to what the user sent, not to \u003c escapes
	if err := enc.Encode(params); err != nil {
		return nil, usageError("params: %v", err)
	}
	raw := bytes.TrimSpace(buf.Bytes())
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
	if c.IsSet("runs-file") {
		return runTriggerMany(c, env, name, format)
	}
	for _, f := range []string{"batch-size", "from-line"} {
		if c.IsSet(f) {
			return usageError("--%s goes with --runs-file", f)
		}
	}
	params, err := buildParams(c, env)
	if err != nil {
		return err
	}
	if err := checkWaitFlags(c); err != nil {
		return err
	}
	if c.Int("version") < 0 {
		return usageError("--version %d: must be positive", c.Int("version"))
	}
	if k := c.String("idempotency-key"); c.IsSet("idempotency-key") && strings.TrimSpace(k) == "" {
		return usageError("--idempotency-key is empty")
	} else if err := store.ValidateIdempotencyKey(k); err != nil {
		return usageError("--idempotency-key: %v", err)
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
	case errors.Is(err, store.ErrCommitOutcomeUnknown) && c.String("idempotency-key") != "":
		return failure(fmt.Errorf("%w: the run may have been created; trigger again with the same --idempotency-key, which returns the run if it exists", err))
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		return failure(fmt.Errorf("%w: the run may have been created; check with `ffctl run list --workflow %s` before triggering again (an --idempotency-key makes a retry safe)", err, name))
	case err != nil:
		return failure(err)
	}
	if res.Existing {
		fmt.Fprintf(env.Stderr, "idempotency key %q already used with the same params: returning existing run %s\n", c.String("idempotency-key"), res.RunID)
	}
	if !c.Bool("wait") {
		if format == "json" {
			run, err := s.GetRun(c.Context, res.RunID)
			if err != nil {
				return failure(err)
			}
			return writeJSON(env.Stdout, runJSON{Run: inDAGOrder(run), Existing: res.Existing})
		}
		fmt.Fprintf(env.Stdout, "%s\n", res.RunID)
		return nil
	}
	// The id first: whoever stops the wait still knows which run to follow.
	fmt.Fprintf(env.Stderr, "run %s triggered; waiting for it to end (ctrl-C stops waiting, not the run)\n", res.RunID)
	return waitAndReport(c, env, s, res.RunID, format)
}

func checkWaitFlags(c *cli.Context) error {
	if c.Duration("timeout") < 0 {
		return usageError("--timeout %s: must not be negative", c.Duration("timeout"))
	}
	return nil
}

// runJSON is the run object of -o json: the store.Run fields plus
// "existing" for triggers.
type runJSON struct {
	store.Run
	Existing bool `json:"existing,omitempty"`
}

func runWaitCmd(c *cli.Context, env *Env) error {
	t, err := openIDTarget(c, store.IDRun, func() error { return checkWaitFlags(c) })
	if err != nil {
		return err
	}
	defer t.s.Close()
	return waitAndReport(c, env, t.s, t.id, t.format)
}

// waitAndReport polls the run until it has ended (see store.Run.Ended) or
// --timeout passes, showing progress on a terminal, then prints it. Exit 0
// only when it SUCCEEDED. It only reads: a timeout leaves the run alone.
func waitAndReport(c *cli.Context, env *Env, s *store.Store, id uuid.UUID, format string) error {
	ctx := c.Context
	if t := c.Duration("timeout"); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	live := env.isTTY(env.Stderr)
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
			if run.Ended() {
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
	if !run.Ended() {
		if c.Context.Err() != nil {
			// Only the wait ends: the run goes on, and can be waited for again.
			err := fmt.Errorf("interrupted; run %s continues (ffctl run wait %s)", id, id)
			if ie := interrupted(c.Context); ie != nil {
				return &ExitError{Code: ie.ExitCode(), Err: err}
			}
			return failure(err)
		}
		if run.ID == uuid.Nil {
			// The timeout fired before the first read answered: read once
			// more, so the message says what the run is (or that it is not).
			rctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
			r, err := s.GetRun(rctx, id)
			cancel()
			if errors.Is(err, store.ErrNotFound) {
				return failure(err)
			}
			if err == nil {
				run = r
			}
		}
		state := string(run.State)
		if state == "" {
			state = "unknown"
		}
		held := ""
		if run.Paused != nil {
			held = fmt.Sprintf("; its workflow is %s: its tasks wait for `ffctl workflow resume %s`", pauseLine(run.Paused), run.Paused.Workflow)
		}
		return failure(fmt.Errorf("timed out after %s waiting for run %s (state %s, %d/%d tasks done)%s; the run was not touched",
			c.Duration("timeout"), id, state, run.TasksDone, run.TasksTotal, held))
	}
	if err := printRun(env.Stdout, env.colours(), run, format); err != nil {
		return err
	}
	if run.State != core.RunSucceeded {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("run %s ended %s", id, run.State)}
	}
	return nil
}

func progressLine(r store.Run) string {
	counts := core.TaskCounts{}
	for _, t := range r.Tasks {
		counts[t.State]++
	}
	var parts []string
	for _, st := range core.TaskStates {
		if n := counts[st]; n > 0 {
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
	st, _, err := filterFlag(c, "state")
	if err != nil {
		return err
	}
	state := core.RunState(strings.ToUpper(st))
	if state != "" && !state.Valid() {
		return usageError("--state %q: want one of %v", c.String("state"), core.RunStates)
	}
	limit, err := checkLimit(c)
	if err != nil {
		return err
	}
	wf, _, err := filterFlag(c, "workflow")
	if err != nil {
		return err
	}
	f := store.RunFilter{Workflow: wf, State: state, Limit: limit}
	if f.Workflow != "" {
		if err := core.ValidateName("workflow", f.Workflow); err != nil {
			return usageError("--workflow: %v", err)
		}
	}
	b, _, err := filterFlag(c, "before")
	if err != nil {
		return err
	}
	if b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			return usageError("--before %q: want an RFC 3339 time such as 2026-11-30T03:00:00Z", b)
		}
		f.Before = &t
	}
	if c.NArg() != 0 {
		return usageError("run list takes no arguments (filters are flags: --workflow, --state)")
	}
	runs, err := query(c, func(ctx context.Context, s *store.Store) ([]store.Run, error) { return s.ListRuns(ctx, f) })
	if err != nil {
		return err
	}
	if format == "json" {
		if runs == nil {
			runs = []store.Run{}
		}
		return writeJSON(env.Stdout, runs)
	}
	tw := newTable(env.Stdout, env.colours(), "RUN ID", "WORKFLOW", "STATE", "TASKS", "CREATED", "FINISHED")
	for _, r := range runs {
		tw.row(r.ID.String(), r.Workflow, string(r.State), fmt.Sprintf("%d/%d", r.TasksDone, r.TasksTotal), fmtTime(&r.CreatedAt), fmtTime(r.FinishedAt))
	}
	if err := tw.flush(); err != nil {
		return err
	}
	if len(runs) == limit && env.isTTY(env.Stderr) {
		fmt.Fprintf(env.Stderr, "(more runs: --before %s)\n", runs[len(runs)-1].CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

func runShow(c *cli.Context, env *Env) error {
	t, err := openIDTarget(c, store.IDRun, nil)
	if err != nil {
		return err
	}
	defer t.s.Close()
	run, err := t.s.GetRun(c.Context, t.id)
	if err != nil {
		return failure(err)
	}
	return printRun(env.Stdout, env.colours(), run, t.format)
}

// printRun writes a run with its task tree (in DAG order, indented by
// depth).
func printRun(w io.Writer, p colours, run store.Run, format string) error {
	if format == "json" {
		return writeJSON(w, runJSON{Run: inDAGOrder(run)})
	}
	fmt.Fprintf(w, "run %s\n  workflow  %s (version %d)\n  state     %s\n  tasks     %d/%d done\n  created   %s\n  finished  %s\n",
		run.ID, core.TerminalText(run.Workflow), run.WorkflowVersion, p.state(string(run.State)), run.TasksDone, run.TasksTotal, fmtTime(&run.CreatedAt), fmtTime(run.FinishedAt))
	if run.CancelRequestedAt != nil {
		fmt.Fprintf(w, "  cancel requested %s\n", fmtTime(run.CancelRequestedAt))
	}
	printPaused(w, run.Paused)
	fmt.Fprintln(w)
	tw := newTable(w, p, "TASK", "TASK ID", "STATE", "ATTEMPT", "WORKER", "STARTED", "FINISHED", "ERROR")
	ordered := core.DAGOrder(run.Tasks)
	for _, o := range ordered {
		t := o.Node
		worker := "-"
		if t.WorkerID != nil {
			worker = *t.WorkerID
		}
		errText := firstLine(t.Error, 60)
		if t.WaitingForHandler != nil { // a worker handed it back: say what it waits for
			errText = store.WaitingReasonPrefix + *t.WaitingForHandler
		}
		tw.row(strings.Repeat("  ", o.Depth)+t.Name, t.ID.String(), string(t.State),
			fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), worker, fmtTime(t.StartedAt), fmtTime(t.FinishedAt), errText)
	}
	if err := tw.flush(); err != nil {
		return err
	}
	printReuses(w, ordered)
	return nil
}

// inDAGOrder returns run with its tasks in core.DAGOrder, the order the
// table shows them in.
func inDAGOrder(run store.Run) store.Run {
	ordered := core.DAGOrder(run.Tasks)
	tasks := make([]store.TaskRun, len(ordered))
	for i, o := range ordered {
		tasks[i] = o.Node
	}
	if run.Tasks != nil {
		run.Tasks = tasks
	}
	return run
}

func runCancel(c *cli.Context, env *Env) error {
	a, err := newIDAction(c, env, store.IDRun, "cancel", "why the run is cancelled")
	if err != nil {
		return err
	}
	defer a.s.Close()
	id, format := a.id, a.format
	res, err := a.s.CancelRun(c.Context, id, actor(), a.reason)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{"run_id": id, "cancelled": true, "tasks_cancelled": res.TasksCancelled})
	}
	fmt.Fprintf(env.Stdout, "run %s: cancellation requested; %d unstarted tasks cancelled, running tasks are being signalled\n", id, res.TasksCancelled)
	return nil
}
