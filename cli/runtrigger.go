package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
)

// runTriggerCommand is `ffctl run trigger`: one run, or one per line of a
// --runs-file (runTriggerMany).
func runTriggerCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "trigger",
		Usage: "start a run of a workflow",
		UsageText: "ffctl run trigger NAME [--param k=v]... [--params-file F] [--idempotency-key K] [--priority P] [--wait [--timeout D]] [-o json]\n" +
			"ffctl run trigger NAME --runs-file F [--batch-size N] [--from-line L] [--priority P] [-o json]\n\n" +
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
			&cli.IntFlag{Name: "priority", Usage: "the priority of every task of the run, 1 (lowest) to 4 (highest): it orders the waiters of a concurrency key or rate limit (default: each task's own)"},
			&cli.BoolFlag{Name: "wait", Usage: "wait until the run ends; exit 0 only if it SUCCEEDED"},
			&cli.StringFlag{Name: "runs-file", Usage: "bulk trigger: one run per line, each a JSON params object (blank lines skipped); - reads standard input; prints one run id per line"},
			&cli.IntFlag{Name: "batch-size", Value: BatchSizeDefault, Usage: "with --runs-file: runs created per transaction"},
			&cli.IntFlag{Name: "from-line", Value: 1, Usage: "with --runs-file: start at this line (resume an interrupted bulk trigger)"},
			outputFlag(),
		}, waitFlags()...),
		Action: func(c *cli.Context) error { return runTrigger(c, env) },
	}
}

// runTrigger is the action of `ffctl run trigger NAME`: one run of the
// given params (or runTriggerMany with --runs-file), its id or -o json
// printed, then with --wait the wait for it to end (waitAndReport).
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
	version, err := versionFlag(c)
	if err != nil {
		return err
	}
	if k := c.String("idempotency-key"); c.IsSet("idempotency-key") && strings.TrimSpace(k) == "" {
		return usageError("--idempotency-key is empty")
	} else if err := core.ValidateIdempotencyKey(k); err != nil {
		return usageError("--idempotency-key: %v", err)
	}
	priority, err := priorityFlag(c)
	if err != nil {
		return err
	}
	tp, err := startCommandTracing(c, env)
	if err != nil {
		return err
	}
	defer stopTracing(env, tp)
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	cl := client.FromStore(s, client.Options{Actor: actor(), TracerProvider: tp.TracerProvider()})
	res, err := cl.Trigger(c.Context, name, params, client.TriggerOptions{Version: version, IdempotencyKey: c.String("idempotency-key"), Priority: priority})
	switch {
	case errors.Is(err, client.ErrInvalidParams):
		return usageError("%v", err)
	case errors.Is(err, client.ErrOutcomeUnknown) && c.String("idempotency-key") != "":
		return failure(fmt.Errorf("%w: the run may have been created; trigger again with the same --idempotency-key, which returns the run if it exists", err))
	case errors.Is(err, client.ErrOutcomeUnknown):
		return failure(fmt.Errorf("%w: the run may have been created; check with `ffctl run list --workflow %s` before triggering again (an --idempotency-key makes a retry safe)", err, name))
	case err != nil:
		return failure(err)
	}
	if res.Existing {
		fmt.Fprintf(env.Stderr, "idempotency key %q already used with the same params: returning existing run %s\n", c.String("idempotency-key"), res.RunID)
	}
	if !c.Bool("wait") {
		if format == "json" {
			run, err := cl.Run(c.Context, res.RunID.String())
			if err != nil {
				return failure(err)
			}
			return writeJSON(env.Stdout, runJSON{Run: run, Existing: res.Existing})
		}
		fmt.Fprintf(env.Stdout, "%s\n", res.RunID)
		return nil
	}
	// The id first: whoever stops the wait still knows which run to follow.
	fmt.Fprintf(env.Stderr, "run %s triggered; waiting for it to end (ctrl-C stops waiting, not the run)\n", res.RunID)
	return waitAndReport(c, env, cl, res.RunID, format)
}

// priorityFlag returns --priority (0 when not given: each task's own), or
// a usage error for a value core.ValidatePriority refuses.
func priorityFlag(c *cli.Context) (int, error) {
	if !c.IsSet("priority") {
		return 0, nil
	}
	p := c.Int("priority")
	if err := core.ValidatePriority(p); err != nil {
		return 0, usageError("--priority: %v", err)
	}
	return p, nil
}
