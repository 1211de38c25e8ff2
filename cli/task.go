package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func taskCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "task",
		Usage: "inspect task runs",
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "show a task run with its whole attempt history",
			UsageText: "ffctl task show TASK_RUN_ID [-o json]",
			Flags:     []cli.Flag{outputFlag()},
			Action: func(c *cli.Context) error {
				format, err := outputFormat(c)
				if err != nil {
					return err
				}
				id, err := oneID(c, "task")
				if err != nil {
					return err
				}
				s, err := openStore(c)
				if err != nil {
					return err
				}
				defer s.Close()
				t, err := s.GetTask(c.Context, id)
				if err != nil {
					return failure(err)
				}
				if format == "json" {
					return writeJSON(env.Stdout, t)
				}
				w := env.Stdout
				fmt.Fprintf(w, "task %s (%s)\n  run       %s (workflow %s)\n  handler   %s\n  state     %s\n  attempt   %d/%d\n  token     %d\n  error     %s\n\n",
					t.ID, sanitizeCell(t.Name), t.RunID, t.Workflow, sanitizeCell(t.Handler), t.State, t.Attempt, t.MaxAttempts, t.FencingToken, firstLine(t.Error, 200))
				tw := newTable(w)
				fmt.Fprintln(tw, "AT\tFROM\tTO\tATTEMPT\tTOKEN\tACTOR\tREASON")
				for _, e := range t.Events {
					from := "-"
					if e.FromState != nil {
						from = *e.FromState
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.At.Local().Format("2006-01-02 15:04:05.000"), from, e.ToState, e.Attempt, e.FencingToken, sanitizeCell(e.Actor), firstLine(e.Reason, 60))
				}
				return tw.Flush()
			},
		}},
	}
}
