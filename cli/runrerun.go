package cli

// This file holds `ffctl run rerun` and the rerun lines of `run show`.

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// runRerunCommand is `ffctl run rerun`.
func runRerunCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "rerun",
		Usage: "start a new run of the same workflow version and params as a run (audited)",
		UsageText: "ffctl run rerun RUN_ID --reason R [--force] [-o json]\n\n" +
			"The new run repeats RUN_ID's workflow version (not the newest) and its stored params, and\n" +
			"records who asked, why and when: `ffctl run show NEW` says what it reruns, `ffctl run show\n" +
			"RUN_ID` lists its reruns. The new run's id is printed. It has no idempotency key, so every\n" +
			"rerun is a new run (two reruns make two runs, each audited). A run that has not ended is\n" +
			"refused unless --force; a paused workflow is treated as by `run trigger`.\n\n" +
			"Example:\n  id=$(ffctl run rerun 0b7c6d2e --reason 'upstream API is back')\n  ffctl run wait \"$id\" --timeout 10m",
		Flags: []cli.Flag{
			reasonFlag(requiredReason("why the run is rerun")),
			&cli.BoolFlag{Name: "force", Usage: "rerun a run that has not ended (the two then run side by side)"},
			outputFlag(),
		},
		Action: func(c *cli.Context) error { return runRerun(c, env) },
	}
}

// runRerun is the action of `ffctl run rerun RUN_ID`: the new run's id (or
// its -o json) on stdout.
func runRerun(c *cli.Context, env *Env) error {
	a, err := newIDAction(c, env, store.IDRun, "rerun", "why the run is rerun")
	if err != nil {
		return err
	}
	defer a.s.Close()
	newID, err := a.s.Rerun(c.Context, store.RerunRequest{RunID: a.id, Actor: actor(), Reason: a.reason, Force: c.Bool("force")})
	switch {
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		return failure(fmt.Errorf("%w: the rerun may have been created; `ffctl run show %s` lists the reruns of the run: look there before rerunning again", err, a.id))
	case err != nil:
		return failure(err)
	}
	if a.format == "json" {
		run, err := a.s.GetRun(c.Context, newID)
		if err != nil {
			return failure(err)
		}
		return writeJSON(env.Stdout, runJSON{Run: run.InDAGOrder()})
	}
	fmt.Fprintf(env.Stdout, "%s\n", newID)
	return nil
}

// printRerunLines writes run show's rerun lines: what run reruns ("rerun
// of OLD (by ACTOR at T: REASON)") and its own reruns, newest first.
func printRerunLines(w io.Writer, run store.Run) {
	if o := run.RerunOf; o != nil {
		gone := ""
		if o.Deleted {
			gone = "; that run has since been deleted"
		}
		fmt.Fprintf(w, "  rerun of  %s%s\n", rerunText(*o), gone)
	}
	for i, r := range run.Reruns {
		label := "          "
		if i == 0 {
			label = "  reruns   "
		}
		fmt.Fprintf(w, "%s%s, %s\n", label, rerunText(r), *r.State)
	}
	if n := run.RerunsTotal - len(run.Reruns); n > 0 {
		fmt.Fprintf(w, "            and %d older (the newest %d are shown)\n", n, len(run.Reruns))
	}
}

// rerunText is "RUN_ID (by ACTOR at T: REASON)", the actor and reason made
// safe for a terminal.
func rerunText(l store.RerunLink) string {
	return fmt.Sprintf("%s (by %s at %s: %s)", l.RunID, core.TerminalText(l.By), fmtTime(&l.At), core.TerminalText(l.Reason))
}
