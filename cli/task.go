package cli

import (
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func taskCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "task",
		Usage:     "inspect task runs",
		UsageText: "ffctl task show TASK_RUN_ID [-o json]\nffctl task logs TASK_RUN_ID [--attempt N] [--follow] [-o json]\n\nExample:\n  ffctl task show 3f1f8e2b-8f0a-4c7e-9d55-0b7c6d2e7a10",
		Subcommands: []*cli.Command{{
			Name:  "show",
			Usage: "show a task run with every attempt and its whole history",
			UsageText: "ffctl task show TASK_RUN_ID [-o json]\n\n" +
				"Attempts (worker, fencing token, start, end, outcome, error) are rebuilt from the\n" +
				"task_events history, which is listed after them with every transition's actor and reason.\n" +
				"A shell task's stdout and stderr (and an error of several lines) show their last 10 lines;\n" +
				"-o json holds them whole.\n" +
				"TASK_RUN_ID is the whole id or any unique prefix of at least 6 hex digits.\n\n" +
				"Example:\n  ffctl task show 3f1f8e2b-8f0a-4c7e-9d55-0b7c6d2e7a10 -o json",
			Flags:  []cli.Flag{outputFlag()},
			Action: func(c *cli.Context) error { return taskShow(c, env) },
		}, taskLogsCommand(env), forgetKeyCommand(env)},
	}
}

func taskShow(c *cli.Context, env *Env) error {
	target, err := openIDTarget(c, store.IDTask, nil)
	if err != nil {
		return err
	}
	defer target.s.Close()
	t, err := target.cl.Task(c.Context, target.id.String())
	if err != nil {
		return clientFailure(err)
	}
	attempts := t.Attempts
	if target.format == "json" {
		return writeJSON(env.Stdout, t)
	}
	w := env.Stdout
	p := env.colours()
	handler := core.TerminalText(t.Handler)
	if handler == "" { // a held task: the scheduler runs it
		handler = "-"
	}
	fmt.Fprintf(w, "task %s (%s)\n  run       %s (workflow %s)\n  handler   %s\n  state     %s\n  attempt   %d/%d\n  token     %d\n  error     %s\n%s%s",
		t.ID, core.TerminalText(t.Name), t.RunID, core.TerminalText(t.Workflow), handler, p.state(string(t.State)), t.Attempt, t.MaxAttempts, t.FencingToken, firstLine(t.Error, 200), reuseLine(t.TaskRun), heldLine(t.TaskDetail)+flowLine(t.TaskRun))
	printTaskOutput(w, t.TaskDetail)
	fmt.Fprint(w, "\nATTEMPTS\n")
	at := newTable(w, p, "ATTEMPT", "WORKER", "TOKEN", "STARTED", "FINISHED", "OUTCOME", "ERROR")
	for _, a := range attempts {
		worker := "-"
		if a.WorkerID != nil {
			worker = *a.WorkerID
		}
		at.row(strconv.Itoa(a.Attempt), worker, strconv.FormatInt(a.FencingToken, 10), fmtTime(&a.StartedAt), fmtTime(a.FinishedAt), string(a.Outcome), firstLine(a.Error, 60))
	}
	if err := at.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHISTORY")
	ht := newTable(w, p, "AT", "FROM", "TO", "ATTEMPT", "TOKEN", "ACTOR", "REASON")
	for _, e := range t.Events {
		from := "-"
		if e.FromState != nil {
			from = string(*e.FromState)
		}
		ht.row(e.At.Local().Format("2006-01-02 15:04:05.000"), from, string(e.ToState), strconv.Itoa(e.Attempt), strconv.FormatInt(e.FencingToken, 10), e.Actor, firstLine(e.Reason, 60))
	}
	return ht.flush()
}
