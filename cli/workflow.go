package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/handlers"
)

func workflowCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "workflow",
		Usage:     "apply, list and show workflow definitions; pause and resume workflows",
		UsageText: "ffctl workflow apply|list|show|pause|resume [command options] [arguments...]\n\nExample:\n  ffctl workflow apply -f demo/wordcount.yaml && ffctl workflow show wordcount",
		Subcommands: append([]*cli.Command{
			{
				Name:  "apply",
				Usage: "validate a workflow file (YAML or JSON) and store it as the newest version",
				UsageText: "ffctl workflow apply -f FILE [--strict] [-o json]\n\n" +
					"The whole file is checked before anything is written (names, tasks, dependencies and\n" +
					"cycles, retry and timeout values, unknown fields, and the params of built-in handlers:\n" +
					"noop, sleep, fail, shell, http); an unchanged definition is a no-op, a changed one\n" +
					"becomes the next version. A handler that no worker seen in the last 10 minutes\n" +
					"registers is a warning on standard error naming the handlers they do register\n" +
					"(--strict: an error, exit 1, nothing stored).\n\n" +
					"The file's optional schedules: list (name, cron, timezone, params, overlap, catchup,\n" +
					"catchup_window, jitter) is applied in the same transaction: the file owns them; entries\n" +
					"are created or updated, those no longer in the file deleted; a name held by an\n" +
					"ffctl schedule create schedule or another workflow's file is refused (exit 1, nothing stored).\n\nExample:\n  ffctl workflow apply -f demo/wordcount.yaml",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "workflow file (YAML or JSON, required); - reads standard input"},
					&cli.BoolFlag{Name: "strict", Usage: "refuse (exit 1, nothing stored) a handler no live worker registers"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return workflowApply(c, env) },
			},
			{
				Name:      "list",
				Usage:     "list workflows (newest version of each)",
				UsageText: "ffctl workflow list [--limit N] [-o json]\n\nExample:\n  ffctl workflow list -o json",
				Flags:     []cli.Flag{outputFlag(), limitFlag(100)},
				Action:    func(c *cli.Context) error { return workflowList(c, env) },
			},
			{
				Name:      "show",
				Usage:     "show a workflow's definition",
				UsageText: "ffctl workflow show NAME [--version N] [-o json]\n\nExample:\n  ffctl workflow show wordcount -o json",
				Flags:     []cli.Flag{outputFlag(), &cli.IntFlag{Name: "version", Usage: "version (default newest)"}},
				Action:    func(c *cli.Context) error { return workflowShow(c, env) },
			},
		}, workflowPauseCommands(env)...),
	}
}

func workflowApply(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	path := c.String("file")
	if path == "" {
		return usageError("workflow apply needs -f FILE (YAML or JSON; - reads standard input)")
	}
	if c.NArg() != 0 {
		return usageError("workflow apply takes no arguments: give the file with -f FILE")
	}
	data, err := readInput(env, path)
	if err != nil {
		return err
	}
	file, err := core.ParseWorkflowFile(data)
	if err != nil {
		return usageError("%s: %v", path, err)
	}
	def := file.Definition
	scheds := schedule.FromFile(def.Name, file.Schedules)
	if _, err := schedule.ValidateFile(def, scheds); err != nil {
		return usageError("%s: %v", path, err)
	}
	for _, t := range def.Tasks {
		if err := handlers.ValidateParams(t.Handler, t.Params); err != nil {
			return usageError("%s: task %s: %v", path, t.Name, err)
		}
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	warnings, err := unservedHandlers(c.Context, s, def)
	if err != nil {
		return failure(err)
	}
	for _, w := range warnings {
		if c.Bool("strict") {
			return failure(fmt.Errorf("%s: %s (--strict; nothing stored)", path, w))
		}
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	wf, created, changes, err := s.ApplyWorkflowFile(c.Context, def, scheds, actor())
	if err != nil {
		return failure(err)
	}
	if created {
		broken, err := unfitSchedules(c.Context, s, wf)
		if err != nil {
			return failure(fmt.Errorf("workflow %s: stored version %d, but its schedules could not be checked: %w", wf.Name, wf.Version, err))
		}
		for _, w := range broken {
			fmt.Fprintf(env.Stderr, "warning: %s\n", w)
		}
		warnings = append(warnings, broken...)
	}
	if format == "json" {
		if warnings == nil {
			warnings = []string{}
		}
		return writeJSON(env.Stdout, map[string]any{"name": wf.Name, "version": wf.Version, "created": created, "tasks": len(wf.Definition.Tasks), "warnings": warnings, "schedules": changes})
	}
	if created {
		fmt.Fprintf(env.Stdout, "workflow %s: stored version %d (%d tasks)\n", wf.Name, wf.Version, len(wf.Definition.Tasks))
	} else {
		fmt.Fprintf(env.Stdout, "workflow %s: unchanged (version %d)\n", wf.Name, wf.Version)
	}
	for _, ch := range changes {
		fmt.Fprintf(env.Stdout, "schedule %s: %s\n", ch.Name, ch.Action)
	}
	return nil
}

// unfitSchedules returns one warning per schedule created with `ffctl
// schedule create` whose params the new version wf refuses (a task's
// idempotency key needs a param the schedule does not pass): each of its
// ticks would record failed. A workflow file's own schedules were checked
// against the file before anything was stored.
func unfitSchedules(ctx context.Context, s *store.Store, wf store.Workflow) ([]string, error) {
	scheds, err := s.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sc := range scheds {
		if sc.Workflow != wf.Name || sc.Owner == schedule.OwnerFile {
			continue
		}
		_, err := s.CheckRuns(ctx, wf.Name, wf.Version, []json.RawMessage{sc.Params})
		var bad *store.BadRunError
		switch {
		case errors.As(err, &bad):
			out = append(out, fmt.Sprintf("schedule %s: its params do not fit version %d: %v; every tick will record failed until the schedule's params (delete and create it again) or the workflow change",
				core.TerminalText(sc.Name), wf.Version, bad.Err))
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}

// LiveWorkersWithinDefault is how recently a worker must have been seen for
// `workflow apply` to count its handlers.
const LiveWorkersWithinDefault = 10 * time.Minute

// unservedHandlers returns one warning per handler of def that no worker
// seen within LiveWorkersWithinDefault registers, naming the handlers
// those workers do register (or saying that none was seen).
func unservedHandlers(ctx context.Context, s *store.Store, def *core.Definition) ([]string, error) {
	live, workers, err := s.LiveHandlers(ctx, LiveWorkersWithinDefault)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(live))
	for h := range live {
		names = append(names, h)
	}
	sort.Strings(names)
	within := fmt.Sprintf("%d min", int(LiveWorkersWithinDefault.Minutes()))
	var out []string
	seen := map[string]bool{}
	for _, t := range def.Tasks {
		if _, ok := live[t.Handler]; ok || seen[t.Handler] {
			continue
		}
		seen[t.Handler] = true
		var w string
		switch {
		case workers == 0:
			w = fmt.Sprintf("handler %s (task %s): no worker has been seen in the last %s, so none is known to register it", core.TerminalText(t.Handler), t.Name, within)
		default:
			w = fmt.Sprintf("handler %s (task %s): none of the %d workers seen in the last %s registers it; they register: %s", core.TerminalText(t.Handler), t.Name, workers, within, strings.Join(names, ", "))
		}
		if t.Handler == "shell" {
			w += " (workers register shell only with --allow-shell)"
		}
		out = append(out, w+"; its tasks will wait for such a worker, then fail")
	}
	return out, nil
}

func workflowList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	limit, err := checkLimit(c)
	if err != nil {
		return err
	}
	wfs, err := query(c, func(ctx context.Context, s *store.Store) ([]store.WorkflowSummary, error) {
		return s.ListWorkflows(ctx, limit)
	})
	if err != nil {
		return err
	}
	if format == "json" {
		if wfs == nil {
			return writeJSON(env.Stdout, []any{})
		}
		return writeJSON(env.Stdout, wfs)
	}
	tw := newTable(env.Stdout, env.colours(), "NAME", "VERSION", "TASKS", "RUNS", "CREATED", "PAUSED")
	for _, w := range wfs {
		paused := "-"
		if w.Paused != nil {
			paused = pauseLine(w.Paused)
		}
		tw.row(w.Name, strconv.Itoa(w.Version), strconv.Itoa(w.Tasks), strconv.FormatInt(w.Runs, 10), fmtTime(&w.CreatedAt), paused)
	}
	return tw.flush()
}

func workflowShow(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError("workflow show takes one workflow name")
	}
	if err := core.ValidateName("workflow", c.Args().First()); err != nil {
		return usageError("%v", err)
	}
	version, err := versionFlag(c)
	if err != nil {
		return err
	}
	wf, err := query(c, func(ctx context.Context, s *store.Store) (store.Workflow, error) {
		return s.GetWorkflow(ctx, c.Args().First(), version)
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, newWorkflowJSON(wf))
	}
	fmt.Fprintf(env.Stdout, "workflow %s version %d (created %s)\n", wf.Name, wf.Version, fmtTime(&wf.CreatedAt))
	if wf.Definition.Description != "" {
		fmt.Fprintf(env.Stdout, "%s\n", core.TerminalText(wf.Definition.Description))
	}
	tw := newTable(env.Stdout, env.colours(), "TASK", "HANDLER", "DEPENDS ON", "MAX ATTEMPTS", "TIMEOUT")
	for _, t := range wf.Definition.Tasks {
		timeout := "-"
		if t.Timeout != nil {
			timeout = t.TimeoutOrZero().String()
		}
		deps := "-"
		if len(t.DependsOn) > 0 {
			deps = fmt.Sprint(t.DependsOn)
		}
		tw.row(core.TerminalText(t.Name), core.TerminalText(t.Handler), deps, strconv.Itoa(t.Policy().MaxAttempts), timeout)
	}
	return tw.flush()
}

// workflowJSON is `workflow show -o json`: the stored workflow with its
// definition in the workflow file's shape, every field present (absent
// values null, fail_fast false), unlike the stored encoding, which omits
// them and must keep doing so (an unchanged file is recognised by equal
// jsonb).
type workflowJSON struct {
	Name       string         `json:"name"`
	Version    int            `json:"version"`
	Definition definitionJSON `json:"definition"`
	CreatedAt  time.Time      `json:"created_at"`
}

type definitionJSON struct {
	Name        string        `json:"name"`
	Description *string       `json:"description"`
	FailFast    bool          `json:"fail_fast"`
	Tasks       []taskDefJSON `json:"tasks"`
}

type taskDefJSON struct {
	Name           string          `json:"name"`
	Handler        string          `json:"handler"`
	Params         json.RawMessage `json:"params"`
	DependsOn      []string        `json:"depends_on"`
	Retry          *retrySpecJSON  `json:"retry"`
	Timeout        *core.Duration  `json:"timeout"`
	IdempotencyKey *string         `json:"idempotency_key"`
	IdempotencyTTL *core.Duration  `json:"idempotency_ttl"`
}

type retrySpecJSON struct {
	MaxAttempts    *int           `json:"max_attempts"`
	InitialBackoff *core.Duration `json:"initial_backoff"`
	MaxBackoff     *core.Duration `json:"max_backoff"`
}

func newWorkflowJSON(wf store.Workflow) workflowJSON {
	d := wf.Definition
	out := workflowJSON{Name: wf.Name, Version: wf.Version, CreatedAt: wf.CreatedAt,
		Definition: definitionJSON{Name: d.Name, Description: nonEmpty(d.Description), FailFast: d.FailFast, Tasks: make([]taskDefJSON, 0, len(d.Tasks))}}
	for _, t := range d.Tasks {
		tj := taskDefJSON{Name: t.Name, Handler: t.Handler, Params: t.Params, DependsOn: t.DependsOn, Timeout: t.Timeout, IdempotencyKey: nonEmpty(t.IdempotencyKey),
			IdempotencyTTL: t.IdempotencyTTL}
		if len(tj.Params) == 0 {
			tj.Params = json.RawMessage("null")
		}
		if tj.DependsOn == nil {
			tj.DependsOn = []string{}
		}
		if r := t.Retry; r != nil {
			tj.Retry = &retrySpecJSON{MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff, MaxBackoff: r.MaxBackoff}
		}
		out.Definition.Tasks = append(out.Definition.Tasks, tj)
	}
	return out
}

// nonEmpty returns nil for "", else a pointer to s.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
