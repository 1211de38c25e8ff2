package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/handlers"
)

func workflowCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "workflow",
		Usage:     "apply, list, show and roll back workflow definitions; pause and resume workflows",
		UsageText: "ffctl workflow apply|list|show|rollback|pause|resume [command options] [arguments...]\n\nExample:\n  ffctl workflow apply -f demo/wordcount.yaml && ffctl workflow show wordcount",
		Subcommands: append([]*cli.Command{
			{
				Name:  "apply",
				Usage: "validate a workflow file (YAML or JSON) and store it as the newest version",
				UsageText: "ffctl workflow apply -f FILE [--allow-unknown-handler | --strict] [-o json]\n\n" +
					"The whole file is checked before anything is written (names, tasks, dependencies and\n" +
					"cycles, retry and timeout values, unknown fields, and the params of built-in handlers:\n" +
					"noop, sleep, fail, shell, http); an unchanged definition is a no-op, a changed one\n" +
					"becomes the next version. A handler that none of the workers seen in the last 10\n" +
					"minutes registers is refused (exit 2, nothing stored), naming the task, the handler and\n" +
					"the handlers they do register; --allow-unknown-handler stores it with a warning. With no\n" +
					"worker seen at all it is a warning (--strict: an error, exit 1, nothing stored).\n" +
					"A task that sets no retry gets 3 attempts, backoff 1s to 1m (full jitter), and no\n" +
					"timeout (shell included): ffctl workflow show prints each task's effective values.\n\n" +
					"The file's optional schedules: list (name, cron, timezone, params, overlap, catchup,\n" +
					"catchup_window, jitter) is applied in the same transaction: the file owns them; entries\n" +
					"are created or updated, those no longer in the file deleted; a name held by an\n" +
					"ffctl schedule create schedule or another workflow's file is refused (exit 1, nothing stored).\n\nExample:\n  ffctl workflow apply -f demo/wordcount.yaml",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "workflow file (YAML or JSON, required); - reads standard input"},
					&cli.BoolFlag{Name: "strict", Usage: "refuse (exit 1, nothing stored) a handler no live worker registers, also when no worker has been seen"},
					allowUnknownHandlerFlag(),
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
				Name:  "show",
				Usage: "show a workflow's definition, each task's effective retry policy and timeout, and its rollbacks",
				UsageText: "ffctl workflow show NAME [--version N] [-o json]\n\n" +
					"Each task's retry policy and timeout are the values the engine applies: the file's, else\n" +
					"the defaults (3 attempts, backoff 1s to 1m with full jitter, no timeout), marked (default).\n\n" +
					"Example:\n  ffctl workflow show wordcount -o json",
				Flags:  []cli.Flag{outputFlag(), &cli.IntFlag{Name: "version", Usage: "version (default newest)"}},
				Action: func(c *cli.Context) error { return workflowShow(c, env) },
			},
			workflowRollbackCommand(env),
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
	if c.Bool("strict") && c.Bool("allow-unknown-handler") {
		return usageError("workflow apply: --strict and --allow-unknown-handler contradict each other: give one")
	}
	data, err := readInput(env, path)
	if err != nil {
		return err
	}
	// The file is checked before the database is reached: a bad file is
	// reported as bad input (exit 2) wherever the database is.
	if _, _, err := client.ParseWorkflowFile(data, path, handlers.ValidateParams); err != nil {
		return clientFailure(err)
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := client.FromStore(s, client.Options{}).ApplyWorkflow(c.Context, data, client.ApplyOptions{
		Source:      path,
		CheckParams: handlers.ValidateParams,
		Handlers:    handlerPolicy(c),
		Actor:       actor(),
	})
	if err != nil {
		return clientFailure(err)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	if format == "json" {
		return writeJSON(env.Stdout, res)
	}
	if res.Created {
		fmt.Fprintf(env.Stdout, "workflow %s: stored version %d (%d tasks)\n", res.Name, res.Version, res.Tasks)
	} else {
		fmt.Fprintf(env.Stdout, "workflow %s: unchanged (version %d)\n", res.Name, res.Version)
	}
	for _, ch := range res.Schedules {
		fmt.Fprintf(env.Stdout, "schedule %s: %s\n", ch.Name, ch.Action)
	}
	return nil
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
