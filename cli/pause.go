package cli

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// ExitPaused is the exit code of a trigger that a pause with mode drop
// refused (store.ErrWorkflowPaused): nothing was created, and a script
// can tell this from a failure (1) or bad input (2).
const ExitPaused = 3

// workflowPauseCommands are `workflow pause` and `workflow resume`.
func workflowPauseCommands(env *Env) []*cli.Command {
	return []*cli.Command{
		{
			Name:  "pause",
			Usage: "pause a workflow (every version): none of its tasks is dispatched until it is resumed",
			UsageText: "ffctl workflow pause NAME --reason R [--mode queue|drop] [-o json]\n\n" +
				"While a workflow is paused no task of it is dispatched: tasks already RUNNING finish, a\n" +
				"dispatch already on the queue is handed back unclaimed (the task stays READY), and\n" +
				"retries, requeues and newly ready tasks wait. Triggers (run trigger, --runs-file, schedule\n" +
				"ticks) are queued with --mode queue (the default: the run is created, its tasks wait) or\n" +
				"dropped with --mode drop (no run is created, the trigger exits 3, the pause counts it).\n" +
				"Pausing again with the same mode and reason changes nothing; with another mode or reason\n" +
				"it updates the pause (audited). Without --reason a terminal prompts for it.\n\n" +
				"Example:\n  ffctl workflow pause nightly-report --reason 'warehouse migration' --mode drop",
			Flags: []cli.Flag{
				reasonFlag(requiredReason("why")),
				&cli.StringFlag{Name: "mode", Value: string(core.PauseQueue), Usage: "what a trigger does while paused: queue (create the run, its tasks wait) or drop (create nothing, count it)"},
				outputFlag(),
			},
			Action: func(c *cli.Context) error { return workflowPause(c, env) },
		},
		{
			Name:  "resume",
			Usage: "resume a paused workflow: its waiting tasks are dispatched at once",
			UsageText: "ffctl workflow resume NAME [--reason R] [-o json]\n\n" +
				"Ends the pause (audited, with the drops it counted) and dispatches the backlog at once:\n" +
				"the waiting dispatches go out, and the READY tasks whose dispatch was handed back are\n" +
				"sent again. Resuming a workflow that is not paused changes nothing: it says so and\n" +
				"exits 0.\n\n" +
				"Example:\n  ffctl workflow resume nightly-report --reason 'migration done'",
			Flags:  []cli.Flag{reasonFlag(optionalReason), outputFlag()},
			Action: func(c *cli.Context) error { return workflowResume(c, env) },
		},
	}
}

// workflowName returns the one workflow name argument of verb, checked.
func workflowName(c *cli.Context, verb string) (string, error) {
	if c.NArg() != 1 {
		return "", usageError("workflow %s takes one workflow name", verb)
	}
	name := c.Args().First()
	if err := core.ValidateName("workflow", name); err != nil {
		return "", usageError("%v", err)
	}
	return name, nil
}

func workflowPause(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := workflowName(c, "pause")
	if err != nil {
		return err
	}
	mode, err := core.ParsePauseMode(strings.ToLower(strings.TrimSpace(c.String("mode"))))
	if err != nil {
		return usageError("--mode: %v", err)
	}
	reason, err := auditReason(c, env, bufio.NewReader(env.Stdin), "pause", "why the workflow is paused")
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.PauseWorkflow(c.Context, name, mode, actor(), reason)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{"workflow": name, "paused": res.Pause, "changed": res.Changed})
	}
	switch {
	case !res.Changed:
		fmt.Fprintf(env.Stdout, "workflow %s: already paused (mode %s) since %s; nothing changed\n", name, res.Pause.Mode, fmtTime(&res.Pause.Since))
	case res.Repaused:
		fmt.Fprintf(env.Stdout, "workflow %s: pause updated: mode %s, reason %q (paused since %s)\n", name, res.Pause.Mode, core.TerminalText(res.Pause.Reason), fmtTime(&res.Pause.Since))
	default:
		fmt.Fprintf(env.Stdout, "workflow %s: paused (mode %s): no task of it is dispatched until `ffctl workflow resume %s`\n", name, res.Pause.Mode, name)
	}
	return nil
}

func workflowResume(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := workflowName(c, "resume")
	if err != nil {
		return err
	}
	reason := strings.TrimSpace(c.String("reason"))
	if reason != "" {
		if err := core.ValidateReason(reason); err != nil {
			return usageError("--reason: %v", err)
		}
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.ResumeWorkflow(c.Context, name, actor(), reason)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		out := map[string]any{"workflow": name, "resumed": res.Resumed, "redispatched": res.Redispatched, "dropped": res.Pause.Dropped}
		return writeJSON(env.Stdout, out)
	}
	if !res.Resumed {
		fmt.Fprintf(env.Stdout, "workflow %s is not paused; nothing to resume\n", name)
		return nil
	}
	fmt.Fprintf(env.Stdout, "workflow %s: resumed after %s paused (%d triggers dropped); %d handed-back tasks dispatched again, the waiting ones go out now\n",
		name, pausedFor(res), res.Pause.Dropped, res.Redispatched)
	return nil
}

// pausedFor is how long the pause that res ended lasted, to the second
// (database clock: Since and ResumedAt are both its).
func pausedFor(res store.ResumeResult) string {
	return res.ResumedAt.Sub(res.Pause.Since).Round(time.Second).String()
}

// pauseLine is the one line saying a workflow is paused: "paused since …
// by … because …", with the mode and the drops.
func pauseLine(p *store.Pause) string {
	// %q escapes every control character itself (TerminalText first
	// escaped them twice: "evil\\x1b[2J").
	s := fmt.Sprintf("paused since %s by %s because %q (mode %s", fmtTime(&p.Since), core.TerminalText(p.Actor), p.Reason, p.Mode)
	if p.Mode == core.PauseDrop || p.Dropped > 0 {
		s += fmt.Sprintf(", %d dropped", p.Dropped)
	}
	return s + ")"
}

// printPaused writes the pause line of a run of a paused workflow.
func printPaused(w io.Writer, p *store.Pause) {
	if p != nil {
		fmt.Fprintf(w, "  paused    %s: its tasks wait until `ffctl workflow resume`\n", pauseLine(p))
	}
}
