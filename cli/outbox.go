package cli

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
)

func outboxCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "outbox",
		Usage: "inspect the transactional outbox and its quarantine",
		UsageText: "ffctl outbox status|quarantined|retry|drop [command options]\n\nExample:\n  ffctl outbox status -o json\n" +
			"  ffctl outbox quarantined\n  ffctl outbox retry 42 --reason 'limit raised'\n  ffctl outbox drop 42 --reason 'payload cannot be fixed'",
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "pending dispatches, the oldest one's age, recent publishing, and quarantined rows",
				UsageText: "ffctl outbox status [-o json]\n\n" +
					"pending: rows not yet confirmed by RabbitMQ; oldest_pending_seconds: age of the oldest of\n" +
					"them (database clock); published_last_minute: rows confirmed in the last 60 seconds;\n" +
					"failing: pending rows whose last publish attempt failed; quarantined: rows the broker\n" +
					"refuses permanently, set aside (see `ffctl outbox quarantined`).\n\nExample:\n  ffctl outbox status -o json",
				Flags:  []cli.Flag{outputFlag()},
				Action: func(c *cli.Context) error { return outboxStatus(c, env) },
			},
			{
				Name:  "quarantined",
				Usage: "list the rows the broker refuses permanently, with the reason, oldest first",
				UsageText: "ffctl outbox quarantined [--limit N] [-o json]\n\n" +
					"A publisher quarantines a row whose message is larger than its --max-message-bytes, or that\n" +
					"the broker refuses with a 406 (e.g. its max_message_size): the other rows are published.\n" +
					"Retry it (after raising the limit) or drop it (its task is buried DEAD).\n\nExample:\n  ffctl outbox quarantined -o json",
				Flags:  []cli.Flag{limitFlag(100), outputFlag()},
				Action: func(c *cli.Context) error { return outboxQuarantined(c, env) },
			},
			{
				Name:  "retry",
				Usage: "make a quarantined row pending again (audited)",
				UsageText: "ffctl outbox retry ID --reason R [-o json]\n\n" +
					"The row is published on the publishers' next cycle; a row still refused is quarantined again.\n" +
					"The retry is recorded (who, when, why) in the row's audit trail.\n\nExample:\n  ffctl outbox retry 42 --reason 'max-message-bytes raised'",
				Flags:  []cli.Flag{reasonFlag(requiredReason("why")), outputFlag()},
				Action: func(c *cli.Context) error { return outboxRetry(c, env) },
			},
			{
				Name:  "drop",
				Usage: "give up on a quarantined row: it is never published and its task is buried DEAD (audited)",
				UsageText: "ffctl outbox drop ID --reason R [-o json]\n\n" +
					"In one transaction the row is marked dropped (kept, never published) and its task, when it is\n" +
					"still READY waiting for this dispatch, moves READY -> DEAD with the reason, so its run fails\n" +
					"visibly and `ffctl dead requeue` can bring the task back. Both are audited.\n\n" +
					"Example:\n  ffctl outbox drop 42 --reason 'handler renamed; payload cannot be sent'",
				Flags:  []cli.Flag{reasonFlag(requiredReason("why")), outputFlag()},
				Action: func(c *cli.Context) error { return outboxDrop(c, env) },
			},
		},
	}
}

func outboxStatus(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("outbox status takes no arguments")
	}
	st, err := query(c, func(ctx context.Context, s *store.Store) (store.OutboxStatus, error) { return s.OutboxStatus(ctx) })
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, st)
	}
	fmt.Fprintf(env.Stdout, "pending                 %d\noldest pending age      %.1fs\npublished last minute   %d\npending with errors     %d\nquarantined             %d\nheld by a pause         %d\n",
		st.Pending, st.OldestPendingSeconds, st.PublishedLastMinute, st.FailingRows, st.Quarantined, st.Paused)
	return nil
}

func outboxQuarantined(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("outbox quarantined takes no arguments")
	}
	limit, err := checkLimit(c)
	if err != nil {
		return err
	}
	rows, err := query(c, func(ctx context.Context, s *store.Store) ([]store.QuarantinedRow, error) {
		return s.ListQuarantined(ctx, limit)
	})
	if err != nil {
		return err
	}
	if format == "json" {
		if rows == nil {
			rows = []store.QuarantinedRow{}
		}
		return writeJSON(env.Stdout, rows)
	}
	tw := newTable(env.Stdout, env.colours(), "ID", "TASK ID", "WORKFLOW", "TASK", "TASK STATE", "BYTES", "QUARANTINED", "REASON")
	for _, r := range rows {
		at := r.QuarantinedAt
		reason := r.Reason
		tw.row(strconv.FormatInt(r.ID, 10), r.TaskRunID.String(), r.Workflow, firstLine(&r.TaskName, 40), string(r.TaskState),
			strconv.FormatInt(r.PayloadBytes, 10), fmtTime(&at), firstLine(&reason, 80))
	}
	return tw.flush()
}

// parseOutboxID reads the one ID argument of outbox retry|drop: a positive
// decimal outbox row id.
func parseOutboxID(c *cli.Context, verb string) (int64, error) {
	if c.NArg() != 1 {
		return 0, usageError("outbox %s needs exactly one outbox row id (see `ffctl outbox quarantined`), got %d arguments", verb, c.NArg())
	}
	a := strings.TrimSpace(c.Args().First())
	id, err := strconv.ParseInt(a, 10, 64)
	if err != nil || id < 1 {
		return 0, usageError("malformed outbox row id %q: want a positive integer such as 42", c.Args().First())
	}
	return id, nil
}

// outboxRetryResult is the JSON of `outbox retry -o json`.
type outboxRetryResult struct {
	ID      int64 `json:"id"`
	Retried bool  `json:"retried"`
}

// outboxAction is what outbox retry and drop share: the output format, the
// row id, the audit reason (asked for on a terminal) and an open store,
// every bad input refused before anything is opened.
type outboxAction struct {
	format, reason string
	id             int64
	s              *store.Store
}

func newOutboxAction(c *cli.Context, env *Env, verb, why string) (outboxAction, error) {
	var a outboxAction
	var err error
	if a.format, err = outputFormat(c); err != nil {
		return a, err
	}
	if a.id, err = parseOutboxID(c, verb); err != nil {
		return a, err
	}
	if a.reason, err = auditReason(c, env, bufio.NewReader(env.Stdin), verb, why); err != nil {
		return a, err
	}
	a.s, err = openStore(c)
	return a, err
}

func outboxRetry(c *cli.Context, env *Env) error {
	a, err := newOutboxAction(c, env, "retry", "why the row is retried")
	if err != nil {
		return err
	}
	defer a.s.Close()
	if err := a.s.RetryQuarantined(c.Context, a.id, actor(), a.reason); err != nil {
		return failure(err)
	}
	if a.format == "json" {
		return writeJSON(env.Stdout, outboxRetryResult{ID: a.id, Retried: true})
	}
	fmt.Fprintf(env.Stdout, "outbox row %d is pending again\n", a.id)
	return nil
}

// outboxDropResult is the JSON of `outbox drop -o json`.
type outboxDropResult struct {
	ID      int64 `json:"id"`
	Dropped bool  `json:"dropped"`
	store.DropResult
}

func outboxDrop(c *cli.Context, env *Env) error {
	a, err := newOutboxAction(c, env, "drop", "why the row is dropped")
	if err != nil {
		return err
	}
	defer a.s.Close()
	id := a.id
	res, err := a.s.DropQuarantined(c.Context, id, actor(), a.reason)
	if err != nil {
		return failure(err)
	}
	if a.format == "json" {
		return writeJSON(env.Stdout, outboxDropResult{ID: id, Dropped: true, DropResult: res})
	}
	if res.TaskBuried {
		fmt.Fprintf(env.Stdout, "outbox row %d dropped; task %s is DEAD\n", id, res.TaskRunID)
	} else {
		fmt.Fprintf(env.Stdout, "outbox row %d dropped; task %s was already %s and is left as it is\n", id, res.TaskRunID, res.TaskState)
	}
	return nil
}
