package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// runCommand is `ffctl run`: each subcommand comes from a function of its
// own.
func runCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "trigger, list, show, wait for, cancel, rerun and delete workflow runs",
		UsageText: "ffctl run trigger|list|show|wait|cancel|rerun|delete [command options] [arguments...]\n\nExample:\n  id=$(ffctl run trigger nightly-report --param date=2026-11-30)\n  ffctl run wait \"$id\" --timeout 10m",
		Subcommands: []*cli.Command{
			runTriggerCommand(env),
			runListCommand(env),
			runShowCommand(env),
			runWaitCommand(env),
			runCancelCommand(env),
			runRerunCommand(env),
			runDeleteCommand(env),
		},
	}
}

// runListCommand is `ffctl run list`.
func runListCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list runs, newest first",
		UsageText: "ffctl run list [--workflow W] [--state S] [--since T] [--until T] [--param k=v]... [--limit N] [--before TIME] [-o json]\n\n" +
			"Pages go backwards in time: pass the created_at of the last run of a page as --before\n" +
			"to get the next one. --since and --until take an RFC 3339 time or an age (2h: two hours\n" +
			"ago); --param k=v keeps the runs whose param k is v, as a string or as JSON.\n\n" +
			"Example:\n  ffctl run list --workflow nightly-report --state FAILED --limit 20\n" +
			"  ffctl run list --workflow nightly-report --since 24h --param date=2026-11-30\n" +
			"  ffctl run list --limit 100 --before 2026-11-30T03:00:00.123456Z -o json",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "workflow", Usage: "only runs of this workflow"},
			&cli.StringFlag{Name: "state", Usage: "only runs in this state (" + core.JoinRunStates(core.RunStates, ", ") + ")"},
			limitFlag(50),
			&cli.StringFlag{Name: "before", Usage: "only runs created before this RFC 3339 time (the created_at of the previous page's last run)"},
			outputFlag(),
		}, runListFilterFlags()...),
		Action: func(c *cli.Context) error { return runList(c, env) },
	}
}

// runShowCommand is `ffctl run show`.
func runShowCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "show a run and its tasks",
		UsageText: "ffctl run show RUN_ID [-o json]\n\n" +
			"RUN_ID is the whole id or any unique prefix of at least 6 hex digits (as the dashboard shows);\n" +
			"tasks are listed in DAG order (roots first), in the table and in JSON. A task the scheduler holds\n" +
			"says what it holds (a sleep its due time, a wait its event, key and timeout or the event that\n" +
			"completed it, a workflow task its child run); a child run names its parent, a parent lists its children.\n\n" +
			"Example:\n  ffctl run show 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 -o json\n  ffctl run show 0b7c6d2e",
		Flags:  []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error { return runShow(c, env) },
	}
}

// runCancelCommand is `ffctl run cancel`.
func runCancelCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "cancel",
		Usage: "cancel a run: unstarted tasks are cancelled, running ones are signalled",
		UsageText: "ffctl run cancel RUN_ID --reason R [-o json]\n\n" +
			"The cancellation is persisted first; unstarted tasks become CANCELLED at once and running\n" +
			"ones are signalled at their next heartbeat. Each cancelled task gets an audit row.\n" +
			"Without --reason a terminal prompts for it; elsewhere a missing reason is a usage error.\n\n" +
			"Example:\n  ffctl run cancel 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 --reason 'wrong input'",
		Flags:  []cli.Flag{reasonFlag(requiredReason("why")), outputFlag()},
		Action: func(c *cli.Context) error { return runCancel(c, env) },
	}
}

// runJSON is the run object of -o json: the store.Run fields plus
// "existing" for triggers.
type runJSON struct {
	store.Run
	Existing bool `json:"existing,omitempty"`
}

func runList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	f, err := runListFilter(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("run list takes no arguments (filters are flags: --workflow, --state, --since, --until, --param)")
	}
	runs, err := query(c, func(ctx context.Context, s *store.Store) ([]store.Run, error) { return s.ListRuns(ctx, f) })
	if errors.Is(err, store.ErrBadRunFilter) { // the window: its ends are resolved on the database clock
		return usageError("--since %q is after --until %q: %v", c.String("since"), c.String("until"), err)
	}
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
	if len(runs) == f.Limit && env.isTTY(env.Stderr) {
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
	run, err := t.cl.Run(c.Context, t.id.String())
	if err != nil {
		return clientFailure(err)
	}
	return printRun(env.Stdout, env.colours(), run, t.format)
}

// printRun writes a run (with its parent and child runs) and its tasks
// drawn as a tree, each task once (dagLayout: a join named with its
// upstreams), a held task's ERROR cell saying what it holds (taskNote).
func printRun(w io.Writer, p colours, run store.Run, format string) error {
	if format == "json" {
		return writeJSON(w, runJSON{Run: run.InDAGOrder()})
	}
	fmt.Fprintf(w, "run %s\n  workflow  %s (version %d)\n  state     %s\n  tasks     %d/%d done\n  created   %s\n  finished  %s\n",
		run.ID, core.TerminalText(run.Workflow), run.WorkflowVersion, p.state(string(run.State)), run.TasksDone, run.TasksTotal, fmtTime(&run.CreatedAt), fmtTime(run.FinishedAt))
	if run.CancelRequestedAt != nil {
		fmt.Fprintf(w, "  cancel requested %s", fmtTime(run.CancelRequestedAt))
		if run.CancelReason != nil && *run.CancelReason != "" {
			fmt.Fprintf(w, ": %s", core.TerminalText(*run.CancelReason))
		}
		fmt.Fprintln(w)
	}
	printPaused(w, run.Paused)
	if run.Waiting != "" {
		fmt.Fprintf(w, "  %s\n", run.Waiting)
	}
	printRerunLines(w, run)
	printFamilyLines(w, p, run)
	fmt.Fprintln(w)
	tw := newTable(w, p, "TASK", "TASK ID", "STATE", "ATTEMPT", "WORKER", "STARTED", "FINISHED", "ERROR")
	children := runChildren(run)
	for _, l := range dagLayout(run.Tasks) {
		t := l.Node
		worker := "-"
		if t.WorkerID != nil {
			worker = *t.WorkerID
		}
		tw.row(taskCell(l), t.ID.String(), string(t.State),
			fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), worker, fmtTime(t.StartedAt), fmtTime(t.FinishedAt), taskNote(t, children))
	}
	if err := tw.flush(); err != nil {
		return err
	}
	printReuses(w, core.DAGOrder(run.Tasks))
	return nil
}

func runCancel(c *cli.Context, env *Env) error {
	a, err := newIDAction(c, env, store.IDRun, "cancel", "why the run is cancelled")
	if err != nil {
		return err
	}
	defer a.s.Close()
	id, format := a.id, a.format
	res, err := a.cl.Cancel(c.Context, id.String(), client.ActionOptions{Reason: a.reason})
	if err != nil {
		return clientFailure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{"run_id": id, "cancelled": true, "tasks_cancelled": res.TasksCancelled})
	}
	fmt.Fprintf(env.Stdout, "run %s: cancellation requested; %d unstarted tasks cancelled, running tasks are being signalled\n", id, res.TasksCancelled)
	return nil
}
