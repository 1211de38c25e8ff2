package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// Polling of `task logs --follow`: a read every taskLogsPoll; once the
// task is in a final state, reads go on until one finds nothing new at
// least taskLogsSettle after the final state was seen (a worker writes an
// attempt's last lines beside its finish, so they may commit just after
// it).
const (
	taskLogsPoll   = 250 * time.Millisecond
	taskLogsSettle = time.Second
)

// taskLogsCommand is `ffctl task logs`.
func taskLogsCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "logs",
		Usage: "print a task run's log: its handler's log lines and a shell command's stdout and stderr, per attempt",
		UsageText: "ffctl task logs TASK_RUN_ID [--attempt N] [--follow] [-o json]\n\n" +
			"Each line: time, attempt, stream (log, stdout, stderr), the level of a log line, the text.\n" +
			"--attempt N prints attempt N's lines only (exit 1 if the task has not reached attempt N; with --follow, if it ends without reaching it). --follow keeps printing new lines until the task\n" +
			"is in a final state (SUCCEEDED, DEAD, CANCELLED, UPSTREAM_FAILED, SKIPPED), then exits 0.\n" +
			"-o json prints an array of lines; with --follow, one JSON object per line as it comes.\n" +
			"An attempt over the worker's --task-log-max-bytes ends with a line saying what was dropped.\n" +
			"TASK_RUN_ID is the whole id or any unique prefix of at least 6 hex digits.\n\n" +
			"Example:\n  ffctl task logs 3f1f8e2b --attempt 2 --follow",
		Flags: []cli.Flag{outputFlag(),
			&cli.IntFlag{Name: "attempt", Usage: "only this attempt's lines (1 or more)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines until the task reaches a final state"},
		},
		Action: func(c *cli.Context) error { return taskLogs(c, env) },
	}
}

func taskLogs(c *cli.Context, env *Env) error {
	attempt := c.Int("attempt")
	target, err := openIDTarget(c, store.IDTask, func() error {
		if c.IsSet("attempt") && attempt < 1 {
			return usageError("--attempt %d: attempts are counted from 1", attempt)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer target.s.Close()
	id := target.id.String()
	q := client.TaskLogQuery{Attempt: attempt}
	follow := c.Bool("follow")
	var all []store.TaskLogLine
	var finalAt time.Time
	for {
		page, err := target.cl.TaskLogs(c.Context, id, q)
		if err != nil {
			return clientFailure(err)
		}
		for _, l := range page.Lines {
			if err := printTaskLogLine(env.Stdout, l, target.format, follow); err != nil {
				return err
			}
		}
		all = append(all, page.Lines...)
		if n := len(page.Lines); n > 0 {
			q.AfterAttempt, q.AfterSeq = page.Lines[n-1].Attempt, page.Lines[n-1].Seq
		}
		switch {
		case len(page.Lines) == store.TaskLogPageDefault:
			continue // more to read now
		case !follow:
			note := ""
			if len(all) == 0 {
				if note, err = noLinesNote(c, &target, attempt); err != nil {
					return err
				}
			}
			if target.format == "json" {
				if all == nil {
					all = []store.TaskLogLine{}
				}
				return writeJSON(env.Stdout, all)
			}
			if note != "" {
				// Said on stderr, so that stdout stays the lines alone.
				fmt.Fprintln(env.Stderr, note)
			}
			return nil
		case page.State.Terminal() && finalAt.IsZero():
			finalAt = time.Now()
		case !finalAt.IsZero() && len(page.Lines) == 0 && time.Since(finalAt) >= taskLogsSettle:
			if len(all) == 0 && target.format != "json" {
				note, err := noLinesNote(c, &target, attempt)
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stderr, note)
			}
			return nil
		}
		if err := sleepCtx(c.Context, taskLogsPoll); err != nil {
			return nil // interrupted: what was printed stands
		}
	}
}

// noLinesNote is what `task logs` says (on stderr) when it prints no
// line, from the task's attempt: attempt N (--attempt) the task has not
// reached fails (a requeue counts its attempts from 1 again: the attempt
// never ran, which "no log lines" would not say); a task that has not run
// at all (attempt 0: PENDING, UPSTREAM_FAILED, SKIPPED ...) is said to
// have not run; otherwise why an attempt may have no line.
func noLinesNote(c *cli.Context, target *idTarget, attempt int) (string, error) {
	id := target.id.String()
	t, err := target.cl.Task(c.Context, id)
	if err != nil {
		return "", clientFailure(err)
	}
	switch {
	case attempt > t.Attempt:
		return "", failure(fmt.Errorf("task %s has not run attempt %d: its attempt now is %d (%s)", target.id, attempt, t.Attempt, t.State))
	case t.Attempt == 0:
		return fmt.Sprintf("ffctl: no log lines for task %s: it has not run (it is %s)", id, t.State), nil
	}
	of := "task " + id
	if attempt > 0 {
		of = fmt.Sprintf("attempt %d of task %s", attempt, id)
	}
	// "yet" only while the task can still log: an ended one will not.
	yet := " yet"
	if t.State.Terminal() {
		yet = ""
	}
	return "ffctl: no log lines for " + of + " (its handler logged nothing" + yet + ", the worker runs with --task-log-max-bytes 0, or retention removed them)", nil
}

// printTaskLogLine prints l as a text line (terminal-safe), or with
// --follow -o json as one compact JSON object; -o json without --follow
// prints the whole array at the end instead.
func printTaskLogLine(w io.Writer, l store.TaskLogLine, format string, follow bool) error {
	if format == "json" {
		if !follow {
			return nil
		}
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", escapeInvisible(b))
		return err
	}
	level := ""
	if l.Level != "" {
		level = " " + core.TerminalText(l.Level)
	}
	_, err := fmt.Fprintf(w, "%s  #%d %s%s  %s\n", l.LoggedAt.Local().Format("2006-01-02 15:04:05.000"), l.Attempt, l.Stream, level, core.TerminalText(l.Line))
	return err
}

// sleepCtx waits d, or returns ctx's error when it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
