package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func outboxCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "outbox",
		Usage:     "inspect the transactional outbox",
		UsageText: "ffctl outbox status [-o json]\n\nExample:\n  ffctl outbox status -o json",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "pending dispatches, the oldest one's age, and recent publishing",
			UsageText: "ffctl outbox status [-o json]\n\n" +
				"pending: rows not yet confirmed by RabbitMQ; oldest_pending_seconds: age of the oldest of\n" +
				"them (database clock); published_last_minute: rows confirmed in the last 60 seconds;\n" +
				"failing: pending rows whose last publish attempt failed.\n\nExample:\n  ffctl outbox status -o json",
			Flags: []cli.Flag{outputFlag()},
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
				st, err := s.OutboxStatus(c.Context)
				if err != nil {
					return failure(err)
				}
				if format == "json" {
					return writeJSON(env.Stdout, st)
				}
				fmt.Fprintf(env.Stdout, "pending                 %d\noldest pending age      %.1fs\npublished last minute   %d\npending with errors     %d\n",
					st.Pending, st.OldestPendingSeconds, st.PublishedLastMinute, st.FailingRows)
				return nil
			},
		}},
	}
}
