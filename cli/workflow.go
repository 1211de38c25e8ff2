package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
)

func workflowCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "workflow",
		Usage: "apply, list and show workflow definitions",
		Subcommands: []*cli.Command{
			{
				Name:      "apply",
				Usage:     "validate a workflow file (YAML or JSON) and store it as the newest version",
				UsageText: "ffctl workflow apply -f FILE\n\nExample:\n  ffctl workflow apply -f demo/wordcount.yaml",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "workflow file; - reads standard input", Required: true},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return workflowApply(c, env) },
			},
			{
				Name:      "list",
				Usage:     "list workflows (newest version of each)",
				UsageText: "ffctl workflow list [-o json]",
				Flags:     []cli.Flag{outputFlag(), &cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many"}},
				Action:    func(c *cli.Context) error { return workflowList(c, env) },
			},
			{
				Name:      "show",
				Usage:     "show a workflow's definition",
				UsageText: "ffctl workflow show NAME [--version N] [-o json]\n\nExample:\n  ffctl workflow show wordcount -o json",
				Flags:     []cli.Flag{outputFlag(), &cli.IntFlag{Name: "version", Usage: "version (default newest)"}},
				Action:    func(c *cli.Context) error { return workflowShow(c, env) },
			},
		},
	}
}

// maxWorkflowFileBytes bounds workflow files (4 MiB).
const maxWorkflowFileBytes = 4 << 20

func readInput(env *Env, path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = env.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageError("cannot read %s: %v", path, errors.Unwrap(err))
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxWorkflowFileBytes+1))
	if err != nil {
		return nil, usageError("cannot read %s: %v", path, err)
	}
	if len(data) > maxWorkflowFileBytes {
		return nil, usageError("%s is larger than %d bytes", path, maxWorkflowFileBytes)
	}
	return data, nil
}

func workflowApply(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	path := c.String("file")
	data, err := readInput(env, path)
	if err != nil {
		return err
	}
	def, err := core.ParseDefinition(data)
	if err != nil {
		return usageError("%s: %v", path, err)
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	wf, created, err := s.ApplyWorkflow(c.Context, def)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{"name": wf.Name, "version": wf.Version, "created": created, "tasks": len(wf.Definition.Tasks)})
	}
	if created {
		fmt.Fprintf(env.Stdout, "workflow %s: stored version %d (%d tasks)\n", wf.Name, wf.Version, len(wf.Definition.Tasks))
	} else {
		fmt.Fprintf(env.Stdout, "workflow %s: unchanged (version %d)\n", wf.Name, wf.Version)
	}
	return nil
}

func workflowList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	wfs, err := s.ListWorkflows(c.Context, c.Int("limit"))
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		if wfs == nil {
			return writeJSON(env.Stdout, []any{})
		}
		return writeJSON(env.Stdout, wfs)
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "NAME\tVERSION\tTASKS\tRUNS\tCREATED")
	for _, w := range wfs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", w.Name, w.Version, w.Tasks, w.Runs, fmtTime(&w.CreatedAt))
	}
	return tw.Flush()
}

func workflowShow(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError("workflow show takes one workflow name")
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	wf, err := s.GetWorkflow(c.Context, c.Args().First(), c.Int("version"))
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, wf)
	}
	fmt.Fprintf(env.Stdout, "workflow %s version %d (created %s)\n", wf.Name, wf.Version, fmtTime(&wf.CreatedAt))
	if wf.Definition.Description != "" {
		fmt.Fprintf(env.Stdout, "%s\n", wf.Definition.Description)
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "TASK\tHANDLER\tDEPENDS ON\tMAX ATTEMPTS\tTIMEOUT")
	for _, t := range wf.Definition.Tasks {
		timeout := "-"
		if t.Timeout != nil {
			timeout = t.TimeoutOrZero().String()
		}
		deps := "-"
		if len(t.DependsOn) > 0 {
			deps = fmt.Sprint(t.DependsOn)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t.Name, t.Handler, deps, t.Policy().MaxAttempts, timeout)
	}
	return tw.Flush()
}
