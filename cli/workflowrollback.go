package cli

// This file holds `workflow rollback`: an old version's definition made the
// newest again, as a new version, audited.

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/handlers"
)

func workflowRollbackCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "rollback",
		Usage: "make an old version's definition the newest again (a new version, audited)",
		UsageText: "ffctl workflow rollback NAME --to-version N --reason R [--allow-unknown-handler] [-o json]\n\n" +
			"Stores version N's definition (its tasks, params, retry, timeouts, idempotency settings:\n" +
			"everything a version holds) as a new version, newest+1, and audits it (who, why, from\n" +
			"which version to which; ffctl workflow show lists it). Triggers and schedule ticks then\n" +
			"make runs of it. Runs already made keep their version: cancel those of a bad version and\n" +
			"trigger them anew. Schedules are not touched. The handler check of workflow apply\n" +
			"applies: a handler live workers exist to contradict is refused (exit 2, nothing stored)\n" +
			"unless --allow-unknown-handler. N the newest (or with the newest's definition): nothing\n" +
			"to do, exit 2. Serialised with workflow apply: the two never take one number.\n\n" +
			"Example:\n  ffctl workflow rollback nightly-report --to-version 3 --reason 'v4 names handler nop'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to-version", Usage: "the version whose definition becomes the newest again (required; ffctl workflow show NAME --version N shows it)"},
			reasonFlag(requiredReason("why")),
			allowUnknownHandlerFlag(),
			outputFlag(),
		},
		Action: func(c *cli.Context) error { return workflowRollback(c, env) },
	}
}

// toVersion returns --to-version, checked. Errors (usage): missing, not a
// whole number, below 1.
func toVersion(c *cli.Context) (int, error) {
	raw := strings.TrimSpace(c.String("to-version"))
	if raw == "" {
		return 0, usageError("workflow rollback needs --to-version N: the version whose definition becomes the newest again (ffctl workflow show NAME --version N)")
	}
	n, err := strconv.Atoi(raw)
	switch {
	case err != nil:
		return 0, usageError("--to-version %q: not a version number (a whole number, 1 or more)", raw)
	case n < 1:
		return 0, usageError("--to-version %d: versions start at 1", n)
	}
	return n, nil
}

func workflowRollback(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := workflowName(c, "rollback")
	if err != nil {
		return err
	}
	to, err := toVersion(c)
	if err != nil {
		return err
	}
	reason, err := auditReason(c, env, bufio.NewReader(env.Stdin), "rollback", "why the workflow is rolled back")
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	warnings, err := rollbackChecks(c, s, name, to)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	wf, ev, err := s.RollbackWorkflow(c.Context, name, to, actor(), reason)
	switch {
	case errors.Is(err, store.ErrNothingToRollBack), errors.Is(err, core.ErrBadWorkflow):
		return usageError("%v (nothing stored)", err)
	case err != nil:
		return failure(err)
	}
	broken, err := client.FromStore(s, client.Options{}).UnfitSchedules(c.Context, wf)
	if err != nil {
		return failure(fmt.Errorf("workflow %s: stored version %d, but its schedules could not be checked: %w", wf.Name, wf.Version, err))
	}
	for _, w := range broken {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	warnings = append(warnings, broken...)
	if format == "json" {
		if warnings == nil {
			warnings = []string{}
		}
		return writeJSON(env.Stdout, map[string]any{"name": wf.Name, "version": wf.Version, "tasks": len(wf.Definition.Tasks), "event": ev, "warnings": warnings})
	}
	fmt.Fprintf(env.Stdout, "workflow %s: stored version %d (%d tasks), the definition of version %d (the newest was version %d)\n",
		wf.Name, wf.Version, len(wf.Definition.Tasks), ev.ToVersion, ev.FromVersion)
	fmt.Fprintf(env.Stdout, "%s\n", rollbackLine(ev))
	fmt.Fprintf(env.Stdout, "Runs already made keep their version; schedules are unchanged.\n")
	return nil
}

// rollbackChecks checks, before anything is written, that version to of
// workflow name exists and is not the newest, that its built-in handlers'
// params still validate, and runs the handler check (client.CheckHandlers); it
// returns the warnings to print. RollbackWorkflow checks the versions
// again under the workflow's lock. Errors: an unknown workflow or version
// (exit 1), to the newest or a bad old definition (exit 2), the handler
// refusal (exit 2), the store's (exit 1).
func rollbackChecks(c *cli.Context, s *store.Store, name string, to int) ([]string, error) {
	newest, err := s.GetWorkflow(c.Context, name, 0)
	if err != nil {
		return nil, failure(err)
	}
	switch {
	case to > newest.Version:
		return nil, failure(fmt.Errorf("workflow %q has no version %d (its versions are 1 to %d): %w", name, to, newest.Version, store.ErrNotFound))
	case to == newest.Version:
		return nil, usageError("workflow %s: version %d is already the newest: nothing to roll back (ffctl workflow list shows each workflow's newest version)", name, to)
	}
	old, err := s.GetWorkflow(c.Context, name, to)
	if err != nil {
		return nil, failure(err)
	}
	what := fmt.Sprintf("workflow %s version %d", name, to)
	for _, t := range old.Definition.Tasks {
		if err := handlers.ValidateParams(t.Handler, t.Params); err != nil {
			return nil, usageError("%s: task %s: %v (nothing stored)", what, t.Name, err)
		}
	}
	warnings, err := client.FromStore(s, client.Options{}).CheckHandlers(c.Context, &old.Definition, what, handlerPolicy(c))
	if err != nil {
		return nil, clientFailure(err)
	}
	return warnings, nil
}
