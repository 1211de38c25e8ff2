package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// waitFlags are the flags of a command that waits for a run to end.
func waitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "timeout", Usage: "with waiting: give up after this long (exit 1; the run is not touched); 0 waits forever"},
	}
}

// runWaitCommand is `ffctl run wait`.
func runWaitCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "wait",
		Usage: "wait until a run ends; exit 0 only if it SUCCEEDED",
		UsageText: "ffctl run wait RUN_ID [--timeout D] [-o json]\n\n" +
			"A run has ended when it SUCCEEDED, was CANCELLED, or FAILED with nothing left running.\n" +
			"On a terminal, progress (tasks done/total, states) is shown on standard error.\n" +
			"--timeout ends the wait with exit 1 and leaves the run alone; ctrl-C ends it with exit 130\n" +
			"(\"interrupted; run ID continues\") and leaves the run alone too.\n\n" +
			"Example:\n  ffctl run wait 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10 --timeout 10m",
		Flags:  append([]cli.Flag{outputFlag()}, waitFlags()...),
		Action: func(c *cli.Context) error { return runWaitCmd(c, env) },
	}
}

// checkWaitFlags refuses a negative --timeout (usage error).
func checkWaitFlags(c *cli.Context) error {
	if c.Duration("timeout") < 0 {
		return usageError("--timeout %s: must not be negative", c.Duration("timeout"))
	}
	return nil
}

// runWaitCmd is the action of `ffctl run wait RUN_ID`.
func runWaitCmd(c *cli.Context, env *Env) error {
	t, err := openIDTarget(c, store.IDRun, func() error { return checkWaitFlags(c) })
	if err != nil {
		return err
	}
	defer t.s.Close()
	return waitAndReport(c, env, t.cl, t.id, t.format)
}

// waitAndReport waits for the run until it has ended (client.Client.Wait)
// or --timeout passes, showing progress on a terminal, then prints it.
// Exit 0 only when it SUCCEEDED. It only reads: a timeout leaves the run
// alone.
func waitAndReport(c *cli.Context, env *Env, cl *client.Client, id uuid.UUID, format string) error {
	ctx := c.Context
	if t := c.Duration("timeout"); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	live := env.isTTY(env.Stderr)
	run, err := cl.Wait(ctx, id.String(), client.WaitOptions{OnRead: func(r client.Run) {
		if live {
			fmt.Fprintf(env.Stderr, "\r\033[K%s", progressLine(r))
		}
	}})
	if err != nil && ctx.Err() == nil {
		return failure(err) // the run is not found (deleted while waited for)
	}
	if live {
		fmt.Fprint(env.Stderr, "\r\033[K")
	}
	if !run.Ended() {
		return waitCutShort(c, cl, id, run)
	}
	if err := printRun(env.Stdout, env.colours(), run, format); err != nil {
		return err
	}
	if run.State != core.RunSucceeded {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("run %s ended %s", id, run.State)}
	}
	return nil
}

// waitCutShort is the error of a wait for run id that ended before the run
// (last read as run): interrupted (exit 128+signal), or timed out, saying
// the run's state and that it was not touched.
func waitCutShort(c *cli.Context, cl *client.Client, id uuid.UUID, run client.Run) error {
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
		r, err := cl.Run(rctx, id.String())
		cancel()
		if errors.Is(err, client.ErrNotFound) {
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

// progressLine is the one-line progress of a wait on a terminal: the
// run's short id, state, tasks done and the count in each task state.
func progressLine(r client.Run) string {
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
