package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// runDeleteCommand is `ffctl run delete`: an operator's own clean-up of
// settled runs, audited in run_deletions.
func runDeleteCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "delete",
		Usage: "delete settled runs with their tasks and history (audited)",
		UsageText: "ffctl run delete RUN_ID... --reason R [--include-dead] [--dry-run] [-o json]\n" +
			"ffctl run delete --older-than D --state S --reason R [--include-dead] [--dry-run] [--yes] [-o json]\n\n" +
			"Only a run that has ended (" + core.JoinRunStates(core.FinalRunStates(), " or ") + " with nothing left running) can be\n" +
			"deleted: its task runs, outbox rows and task history go with it. Each run deleted is recorded\n" +
			"in run_deletions (who, when, why, what the run was, how many task runs went), which keeps the\n" +
			"record after the rows are gone. With ids it is all or nothing: an unknown id or a run that has\n" +
			"not ended is refused by name, and nothing is deleted. With --older-than and --state it deletes\n" +
			"the runs in that state that ended longer ago than D (database clock), in batches of " + fmt.Sprint(store.PruneBatchDefault) + ";\n" +
			"on a terminal it asks first unless --yes (elsewhere --yes is required). --dry-run lists what\n" +
			"would go and deletes nothing. A run that holds a DEAD task (every FAILED run; a CANCELLED one\n" +
			"whose task died first) goes only with --include-dead, as the pruner keeps it unless --retain-dead:\n" +
			"a requeue could still retry that task. Named by id without it, it is refused; by --state\n" +
			"CANCELLED it is skipped; --state FAILED needs --include-dead.\n\n" +
			"Example:\n  ffctl run delete 0b7c6d2e --reason 'test run with customer data'\n" +
			"  ffctl run delete --older-than 30d --state FAILED --include-dead --dry-run\n" +
			"  ffctl run delete --older-than 30d --state FAILED --include-dead --reason 'incident 42 is closed' --yes",
		Flags: []cli.Flag{
			ageFlag("older-than", "delete the runs that ended longer ago than this"),
			&cli.StringFlag{Name: "state", Usage: "with --older-than: the final state of the runs to delete (" + core.JoinRunStates(core.FinalRunStates(), ", ") + ")"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be deleted; delete nothing"},
			reasonFlag("why (required unless --dry-run: prompted for on a terminal; recorded in run_deletions)"),
			&cli.BoolFlag{Name: "include-dead", Usage: "also delete runs that hold a DEAD task (their DEAD tasks can no longer be requeued)"},
			yesFlag("with --older-than: do not ask for confirmation"),
			outputFlag(),
		},
		Action: func(c *cli.Context) error { return runDelete(c, env) },
	}
}

// runDeleteSelection is what `run delete` acts on: the ids given, or the
// filter.
type runDeleteSelection struct {
	args []core.IDPrefix
	req  store.DeleteRunsRequest
}

// runDeleteTargets reads the run ids or --older-than with --state (usage
// errors: both, neither, a flag without the other, a state that is not
// final, a malformed id).
func runDeleteTargets(c *cli.Context) (runDeleteSelection, error) {
	var sel runDeleteSelection
	sel.req.DryRun = c.Bool("dry-run")
	sel.req.IncludeDead = c.Bool("include-dead")
	for _, name := range []string{"older-than", "state"} {
		if c.IsSet(name) && strings.TrimSpace(c.String(name)) == "" {
			return sel, usageError("--%s is empty: give a value (run delete needs both --older-than and --state, or run ids)", name)
		}
	}
	older, hasOlder, err := filterFlag(c, "older-than")
	if err != nil {
		return sel, err
	}
	st, hasState, err := filterFlag(c, "state")
	if err != nil {
		return sel, err
	}
	switch {
	case c.NArg() > 0 && (hasOlder || hasState):
		return sel, usageError("run delete: give run ids or --older-than with --state, not both")
	case c.NArg() == 0 && !hasOlder && !hasState:
		return sel, usageError("run delete needs at least one run id, or --older-than D with --state S")
	case c.NArg() > 0:
		if c.IsSet("yes") {
			return sel, usageError("--yes only applies with --older-than")
		}
		for _, a := range c.Args().Slice() {
			p, err := parseID(store.IDRun, strings.TrimSpace(a))
			if err != nil {
				return sel, err
			}
			sel.args = append(sel.args, p)
		}
		return sel, nil
	case !hasOlder:
		return sel, usageError("--state needs --older-than: say how long ago the runs must have ended")
	case !hasState:
		return sel, usageError("--older-than needs --state: say which final state (%s) to delete", core.JoinRunStates(core.FinalRunStates(), ", "))
	}
	if sel.req.OlderThan, err = parseAge(older); err != nil {
		return sel, usageError("--older-than: %v", err)
	}
	sel.req.State = core.RunState(strings.ToUpper(strings.TrimSpace(st)))
	if !sel.req.State.Terminal() {
		return sel, usageError("--state %q: only runs in a final state can be deleted: want %s", st, core.JoinRunStates(core.FinalRunStates(), " or "))
	}
	if sel.req.State == core.RunFailed && !sel.req.IncludeDead {
		return sel, usageError("--state FAILED: every FAILED run holds a DEAD task that a requeue could still retry; add --include-dead to delete them anyway")
	}
	return sel, nil
}

func runDelete(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	sel, err := runDeleteTargets(c)
	if err != nil {
		return err
	}
	in := bufio.NewReader(env.Stdin)
	if !sel.req.DryRun {
		if sel.req.Reason, err = auditReason(c, env, in, "deletion", "why the runs are deleted"); err != nil {
			return err
		}
		if len(sel.args) == 0 && !c.Bool("yes") && !env.interactive() {
			return usageError("run delete --older-than needs --yes when not run on a terminal (there is no one to confirm), or --dry-run")
		}
	}
	sel.req.Actor = actor()
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	if len(sel.args) > 0 {
		if sel.req.IDs, err = resolveRunIDs(c, s, sel.args); err != nil {
			return err
		}
	} else if !sel.req.DryRun && !c.Bool("yes") {
		dry := sel.req
		dry.DryRun = true
		would, err := s.DeleteRuns(c.Context, dry)
		if err != nil {
			return failure(err)
		}
		if len(would) == 0 {
			return reportRunDelete(env, format, false, nil)
		}
		ok, err := confirm(env, in, fmt.Sprintf("Delete %d %s run(s) that ended more than %s ago (and any that end meanwhile), with their tasks and history? [y/N] ",
			len(would), sel.req.State, c.String("older-than")))
		if err != nil {
			return err
		}
		if !ok {
			return failure(errors.New("deletion cancelled: nothing was deleted"))
		}
	}
	res, err := s.DeleteRuns(c.Context, sel.req)
	if errors.Is(err, store.ErrCommitOutcomeUnknown) {
		return failure(fmt.Errorf("%w: the runs may have been deleted; check with `ffctl run show ID`", err))
	}
	if err != nil && len(res) == 0 && len(sel.args) > 0 {
		return failure(fmt.Errorf("%w (nothing was deleted)", err))
	}
	if perr := reportRunDelete(env, format, sel.req.DryRun, res); perr != nil {
		return perr
	}
	return failure(err)
}

// resolveRunIDs resolves every id or prefix to one run before any is
// deleted, dropping repeats; unknown ones are refused together.
func resolveRunIDs(c *cli.Context, s *store.Store, args []core.IDPrefix) ([]uuid.UUID, error) {
	seen := map[uuid.UUID]bool{}
	var ids []uuid.UUID
	var missing []string
	for _, p := range args {
		id, err := resolveID(c.Context, s, store.IDRun, p)
		switch {
		case errors.Is(err, store.ErrNotFound):
			missing = append(missing, p.Text)
			continue
		case err != nil:
			return nil, fmt.Errorf("%w (nothing was deleted)", err)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(missing) > 0 {
		return nil, failure(fmt.Errorf("run %s: %w (nothing was deleted)", strings.Join(missing, ", "), store.ErrNotFound))
	}
	return ids, nil
}

// runDeleteReport is `run delete -o json`: what was (or, dry_run, would
// be) deleted.
type runDeleteReport struct {
	DryRun   bool                `json:"dry_run"`
	Runs     []store.RunDeletion `json:"runs"`
	TaskRuns int64               `json:"task_runs"`
}

// reportRunDelete prints the runs deleted (or that would be) and a total.
func reportRunDelete(env *Env, format string, dryRun bool, res []store.RunDeletion) error {
	rep := runDeleteReport{DryRun: dryRun, Runs: res}
	if rep.Runs == nil {
		rep.Runs = []store.RunDeletion{}
	}
	for _, r := range res {
		rep.TaskRuns += r.TaskRuns
	}
	if format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	if len(res) > 0 {
		tw := newTable(env.Stdout, env.colours(), "RUN ID", "WORKFLOW", "STATE", "TASKS", "DEAD", "CREATED", "FINISHED")
		for _, r := range res {
			tw.row(r.RunID.String(), r.Workflow, string(r.State), fmt.Sprint(r.TaskRuns), fmt.Sprint(r.DeadTasks), fmtTime(&r.CreatedAt), fmtTime(r.FinishedAt))
		}
		if err := tw.flush(); err != nil {
			return err
		}
	}
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(env.Stderr, "%s %d run(s) and %d task run(s)\n", verb, len(res), rep.TaskRuns)
	return nil
}
