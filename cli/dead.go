package cli

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
)

func deadCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "dead",
		Usage: "list and requeue DEAD tasks",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list DEAD tasks, most recent first",
				UsageText: "ffctl dead list [--workflow W] [--older-than D] [--limit N] [-o json]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workflow", Usage: "only tasks of this workflow"},
					&cli.DurationFlag{Name: "older-than", Usage: "only tasks dead for at least this long"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error {
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					s, err := openStore(c)
					if err != nil {
						return err
					}
					defer s.Close()
					tasks, err := s.ListDead(c.Context, store.DeadFilter{Workflow: c.String("workflow"), OlderThan: c.Duration("older-than"), Limit: c.Int("limit")})
					if err != nil {
						return failure(err)
					}
					if format == "json" {
						if tasks == nil {
							tasks = []store.TaskRun{}
						}
						return writeJSON(env.Stdout, tasks)
					}
					tw := newTable(env.Stdout)
					fmt.Fprintln(tw, "TASK ID\tWORKFLOW\tTASK\tATTEMPTS\tDIED\tERROR")
					for _, t := range tasks {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.Workflow, sanitizeCell(t.Name), t.Attempt, t.MaxAttempts, fmtTime(t.FinishedAt), firstLine(t.Error, 60))
					}
					return tw.Flush()
				},
			},
			{
				Name:      "requeue",
				Usage:     "move DEAD tasks back to PENDING with a fresh attempt budget (audited)",
				UsageText: "ffctl dead requeue TASK_ID... --reason R\n\nExample:\n  ffctl dead requeue 3f1f8e2b-... --reason 'upstream API fixed'",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "reason", Usage: "why (required; recorded in the audit trail)"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error {
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					if c.NArg() == 0 {
						return usageError("dead requeue needs at least one task id")
					}
					if c.String("reason") == "" {
						return usageError("--reason is required: say why the task is requeued (it is audited)")
					}
					var ids []uuid.UUID
					for _, a := range c.Args().Slice() {
						id, err := parseID("task", a)
						if err != nil {
							return err
						}
						ids = append(ids, id)
					}
					s, err := openStore(c)
					if err != nil {
						return err
					}
					defer s.Close()
					type result struct {
						ID       uuid.UUID `json:"id"`
						Requeued bool      `json:"requeued"`
						Error    string    `json:"error,omitempty"`
					}
					var results []result
					failed := 0
					for _, id := range ids {
						err := s.Requeue(c.Context, id, actor(), c.String("reason"))
						r := result{ID: id, Requeued: err == nil}
						if err != nil {
							failed++
							r.Error = err.Error()
						}
						results = append(results, r)
					}
					if format == "json" {
						if err := writeJSON(env.Stdout, results); err != nil {
							return err
						}
					} else {
						for _, r := range results {
							if r.Requeued {
								fmt.Fprintf(env.Stdout, "requeued %s\n", r.ID)
							} else {
								fmt.Fprintf(env.Stderr, "not requeued: %s\n", r.Error)
							}
						}
					}
					if failed > 0 {
						return failure(errors.New(fmt.Sprintf("%d of %d tasks not requeued", failed, len(ids))))
					}
					return nil
				},
			},
		},
	}
}
