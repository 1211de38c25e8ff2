package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

func deadCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "dead",
		Usage:     "list and requeue DEAD tasks",
		UsageText: "ffctl dead list|requeue [command options]\n\nExample:\n  ffctl dead list --workflow nightly-report --older-than 1h\n  ffctl dead requeue --all --workflow nightly-report --reason 'API key rotated' --yes",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list DEAD tasks, most recent first",
				UsageText: "ffctl dead list [--workflow W] [--run RUN_ID] [--older-than D] [--limit N] [-o json]\n\nExample:\n  ffctl dead list --workflow nightly-report --older-than 30m -o json",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workflow", Usage: "only tasks of this workflow"},
					&cli.StringFlag{Name: "run", Usage: "only tasks of this run"},
					ageFlag("older-than", "only tasks dead for at least this long (database clock)"),
					limitFlag(100),
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return deadList(c, env) },
			},
			{
				Name:  "requeue",
				Usage: "move DEAD tasks back to PENDING with a fresh attempt budget (audited)",
				UsageText: "ffctl dead requeue TASK_ID... --reason R [-o json]\n" +
					"ffctl dead requeue --all [--workflow W] [--run RUN_ID] [--older-than D] --reason R [--yes] [-o json]\n\n" +
					"The tasks move DEAD -> PENDING in one conditional statement for the set: each one's fencing\n" +
					"token is bumped, its attempt counter reset to 0 (a fresh budget of max_attempts), its run\n" +
					"reopened, and an audit row written (who, when, why, DEAD -> PENDING). A task that is not\n" +
					"DEAD, or whose run was cancelled, is refused and left unchanged. In a fail_fast run a requeue\n" +
					"requeues the whole run: its other DEAD tasks and the tasks fail_fast cancelled go back to\n" +
					"PENDING too.\n" +
					"Without --reason a terminal prompts for it.\n" +
					"--all asks for confirmation on a terminal; elsewhere it needs --yes.\n\n" +
					"Example:\n  ffctl dead requeue 3f1f8e2b-8f0a-4c7e-9d55-0b7c6d2e7a10 --reason 'upstream API fixed'\n" +
					"  ffctl dead requeue --all --workflow nightly-report --reason 'disk freed' --yes",
				Flags: []cli.Flag{
					reasonFlag(requiredReason("why")),
					&cli.BoolFlag{Name: "all", Usage: "requeue every DEAD task the filters select (instead of TASK_IDs)"},
					&cli.StringFlag{Name: "workflow", Usage: "with --all: only tasks of this workflow"},
					&cli.StringFlag{Name: "run", Usage: "with --all: only tasks of this run"},
					ageFlag("older-than", "with --all: only tasks dead for at least this long"),
					yesFlag("do not ask for confirmation (required with --all when not on a terminal)"),
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return deadRequeue(c, env) },
			},
		},
	}
}

// deadFilter is the --workflow, --run and --older-than filters as given:
// the run is an id or a prefix, resolved once the database is open.
type deadFilter struct {
	q   store.DeadQuery
	run *core.IDPrefix
}

// query resolves the --run prefix (see resolveID) and returns the query.
func (f deadFilter) query(ctx context.Context, s *store.Store) (store.DeadQuery, error) {
	q := f.q
	if f.run != nil {
		id, err := resolveID(ctx, s, store.IDRun, *f.run)
		if err != nil {
			return q, err
		}
		q.Run = id
	}
	return q, nil
}

// deadQuery reads the --workflow, --run and --older-than filters. A filter
// that is given must select something: an empty value, the nil run id or a
// zero age is a usage error, never "no filter" (a script whose variable came
// out empty must not requeue every DEAD task of every workflow).
func deadQuery(c *cli.Context) (deadFilter, error) {
	var f deadFilter
	q := &f.q
	w, set, err := filterFlag(c, "workflow")
	if err != nil {
		return f, err
	}
	if set {
		if err := core.ValidateName("workflow", w); err != nil {
			return f, usageError("--workflow: %v", err)
		}
		q.Workflow = w
	}
	r, set, err := filterFlag(c, "run")
	if err != nil {
		return f, err
	}
	if set {
		p, err := parseID(store.IDRun, r)
		if err != nil {
			return f, err
		}
		f.run = &p
	}
	if c.IsSet("older-than") {
		d, err := parseAge(c.String("older-than"))
		if err != nil {
			return f, usageError("--older-than %v (leave the flag out to select tasks of any age)", err)
		}
		q.OlderThan = d
	}
	return f, nil
}

func deadList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("dead list takes no arguments (filters are flags: --workflow, --run, --older-than)")
	}
	f, err := deadQuery(c)
	if err != nil {
		return err
	}
	if f.q.Limit, err = checkLimit(c); err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	q, err := f.query(c.Context, s)
	if err != nil {
		return err
	}
	tasks, err := s.ListDeadTasks(c.Context, q)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		if tasks == nil {
			tasks = []store.TaskRun{}
		}
		return writeJSON(env.Stdout, tasks)
	}
	tw := newTable(env.Stdout, env.colours(), "TASK ID", "RUN ID", "WORKFLOW", "TASK", "STATE", "ATTEMPTS", "DIED", "ERROR")
	for _, t := range tasks {
		tw.row(t.ID.String(), t.RunID.String(), t.Workflow, t.Name, string(t.State), fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), fmtTime(t.FinishedAt), firstLine(t.Error, 60))
	}
	return tw.flush()
}

func deadRequeue(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	sel, err := requeueTargets(c, env)
	if err != nil {
		return err
	}
	in := bufio.NewReader(env.Stdin)
	reason, err := requeueReason(c, env, in)
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	var ids []uuid.UUID
	if sel.all {
		ids, err = allDeadIDs(c, env, s, in, sel.filter, format)
	} else {
		ids, err = resolveTaskIDs(c.Context, s, sel.args)
	}
	if err != nil || len(ids) == 0 {
		return err
	}
	res, err := s.RequeueMany(c.Context, ids, actor(), reason)
	if errors.Is(err, store.ErrCommitOutcomeUnknown) {
		return failure(fmt.Errorf("%w: the tasks may have been requeued; check with `ffctl dead list` or `ffctl task show ID` before requeueing again", err))
	}
	if err != nil {
		return failure(fmt.Errorf("%w (nothing was requeued)", err))
	}
	return reportRequeue(env, format, res)
}

// requeueSelection is what `dead requeue` acts on: the task ids given, or
// with --all the filters.
type requeueSelection struct {
	all    bool
	filter deadFilter
	args   []core.IDPrefix
}

// requeueTargets reads the task ids or --all with its filters, and refuses
// --all without --yes where no one can confirm (usage errors).
func requeueTargets(c *cli.Context, env *Env) (requeueSelection, error) {
	sel := requeueSelection{all: c.Bool("all")}
	var err error
	switch {
	case sel.all && c.NArg() > 0:
		return sel, usageError("dead requeue: give task ids or --all, not both")
	case !sel.all && c.NArg() == 0:
		return sel, usageError("dead requeue needs at least one task id, or --all")
	case sel.all:
		if sel.filter, err = deadQuery(c); err != nil {
			return sel, err
		}
		if !c.Bool("yes") && !env.interactive() {
			return sel, usageError("dead requeue --all needs --yes when not run on a terminal (there is no one to confirm)")
		}
		return sel, nil
	}
	for _, f := range []string{"workflow", "run", "older-than"} {
		if c.IsSet(f) {
			return sel, usageError("--%s only applies with --all", f)
		}
	}
	for _, a := range c.Args().Slice() {
		p, err := parseID(store.IDTask, a)
		if err != nil {
			return sel, err
		}
		sel.args = append(sel.args, p)
	}
	return sel, nil
}

// allDeadIDs lists the requeueable DEAD tasks f selects and, unless --yes,
// asks to requeue them. None: it says so (an empty JSON array with -o
// json) and returns none, without error.
func allDeadIDs(c *cli.Context, env *Env, s *store.Store, in *bufio.Reader, f deadFilter, format string) ([]uuid.UUID, error) {
	q, err := f.query(c.Context, s)
	if err != nil {
		return nil, err
	}
	q.Requeueable = true
	q.Limit = maxLimit
	tasks, err := s.ListDeadTasks(c.Context, q)
	if err != nil {
		return nil, failure(err)
	}
	if len(tasks) == 0 {
		if format == "json" {
			return nil, writeJSON(env.Stdout, []client.RequeueReport{})
		}
		fmt.Fprintln(env.Stderr, "no DEAD tasks to requeue")
		return nil, nil
	}
	if !c.Bool("yes") {
		ok, err := confirm(env, in, fmt.Sprintf("Requeue %d DEAD task(s)%s? [y/N] ", len(tasks), describeQuery(q)))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, failure(errors.New("requeue cancelled: nothing changed"))
		}
	}
	ids := make([]uuid.UUID, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids, nil
}

// resolveTaskIDs resolves every id or prefix to one task before any is
// requeued (see resolveID), dropping repeats; unknown ones are refused
// together, and nothing is requeued.
func resolveTaskIDs(ctx context.Context, s *store.Store, args []core.IDPrefix) ([]uuid.UUID, error) {
	texts := make([]string, len(args))
	for i, p := range args {
		texts[i] = p.Text
	}
	ids, err := client.FromStore(s, client.Options{}).ResolveIDs(ctx, store.IDTask, texts)
	if err != nil {
		return nil, clientFailure(fmt.Errorf("%w (nothing was requeued)", err))
	}
	return ids, nil
}

// reportRequeue prints RequeueMany's results (a JSON array of
// requeueResult with -o json) and fails (exit 1) when any task was refused;
// a single refused task is one line, its refusal.
func reportRequeue(env *Env, format string, res []store.RequeueResult) error {
	failed := 0
	out := make([]client.RequeueReport, len(res))
	for i, r := range res {
		out[i] = client.RequeueResult{RequeueResult: r}.Report()
		if !out[i].Requeued {
			failed++
		}
	}
	switch {
	case format == "json":
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	case len(out) == 1 && failed == 1:
		return failure(fmt.Errorf("not requeued: %s", out[0].Error))
	default:
		for _, r := range out {
			switch {
			case r.Requeued && r.With != nil:
				fmt.Fprintf(env.Stdout, "requeued %s (with %s)\n", r.ID, r.With)
			case r.Requeued && len(r.Also) > 0:
				fmt.Fprintf(env.Stdout, "requeued %s and %d other task(s) of its run\n", r.ID, len(r.Also))
			case r.Requeued:
				fmt.Fprintf(env.Stdout, "requeued %s\n", r.ID)
			default:
				fmt.Fprintf(env.Stderr, "ffctl: not requeued: %s\n", r.Error) // every error line starts "ffctl: " (docs/cli.md)
			}
		}
	}
	if failed > 0 {
		return failure(fmt.Errorf("%d of %d tasks not requeued", failed, len(res)))
	}
	return nil
}

func describeQuery(q store.DeadQuery) string {
	var parts []string
	if q.Workflow != "" {
		parts = append(parts, "of workflow "+q.Workflow)
	}
	if q.Run != uuid.Nil {
		parts = append(parts, "of run "+q.Run.String())
	}
	if q.OlderThan > 0 {
		parts = append(parts, "dead for at least "+q.OlderThan.String())
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, ", ")
}

// requeueReason returns --reason, or asks for it on a terminal.
func requeueReason(c *cli.Context, env *Env, in *bufio.Reader) (string, error) {
	return auditReason(c, env, in, "requeue", "why the task is requeued")
}
