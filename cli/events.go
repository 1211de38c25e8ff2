package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
)

// eventsCommand is `ffctl events`: the transition stream (issue 28), not
// to be confused with `ffctl event` (the events wait_for tasks wait for).
func eventsCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "follow the transition stream: every run and task transition (not `ffctl event`, the events wait_for tasks wait for)",
		UsageText: "ffctl events tail|status|off [command options] [arguments...]\n\n" +
			"The stream is on while a publisher runs with --events-exchange NAME (FLOWFORGE_EVENTS_EXCHANGE).\n\n" +
			"Example:\n  ffctl events tail --workflow nightly-report\n  ffctl events tail -o json | jq .",
		Subcommands: []*cli.Command{
			{
				Name:  "tail",
				Usage: "print the transitions as they are published, until interrupted",
				UsageText: "ffctl events tail [--workflow W] [-o json]\n\n" +
					"Binds a queue of its own (server-named, exclusive, deleted when tail exits) to the stream's\n" +
					"exchange and prints each transition published from then on: time, the run's seq, kind,\n" +
					"workflow/task (run id prefix), from -> to. -o json prints each message body as one line.\n" +
					"--workflow W binds run.W.* and task.W.# and keeps only the messages of workflow W exactly\n" +
					"(names may contain dots, so task.W.# also matches a workflow named W.x).\n" +
					"Exit 2 when the stream is off or W is not a workflow name; a W not applied yet is followed\n" +
					"all the same, with a note on standard error.\n\n" +
					"Example:\n  ffctl events tail --workflow nightly-report\n  ffctl events tail -o json",
				Flags: []cli.Flag{outputFlag(),
					&cli.StringFlag{Name: "workflow", Usage: "only the transitions of this workflow's runs and tasks"},
				},
				Action: func(c *cli.Context) error { return eventsTail(c, env) },
			},
			{
				Name:  "status",
				Usage: "whether the stream is on, where it goes, and its backlog: pending rows, the oldest one's age, failing publishes",
				UsageText: "ffctl events status [-o json]\n\n" +
					"on: the stream's setting row exists (a publisher with --events-exchange wrote it; `ffctl events\n" +
					"off` deletes it); exchange, on since and by whom; off: since when, by whom, and the exchange the\n" +
					"rows left still go to (every publisher sends them there). pending: transitions written and not\n" +
					"yet confirmed by RabbitMQ; oldest pending age on the database clock; pending with errors (JSON: failing):\n" +
					"pending rows a publish already failed for, with the newest one's error. Exit 0 whether the\n" +
					"stream is on or off.\n\n" +
					"Example:\n  ffctl events status\n  ffctl events status -o json | jq .pending",
				Flags:  []cli.Flag{outputFlag()},
				Action: func(c *cli.Context) error { return eventsStatus(c, env) },
			},
			{
				Name:  "off",
				Usage: "turn the transition stream off: no transition is written to it from then on",
				UsageText: "ffctl events off [-o json]\n\n" +
					"Rows already written are still published, by every publisher, to the exchange the stream went\n" +
					"to (`ffctl events status` counts them). A publisher started with --events-exchange turns the\n" +
					"stream on again when it starts: remove the flag (FLOWFORGE_EVENTS_EXCHANGE) from the publishers\n" +
					"before they next restart. A stream turned on again, to any exchange, takes the rows left with\n" +
					"it there, as any move of the stream does. -o json: was_on, and drain (exchange, off_at, off_by).\n\n" +
					"Example:\n  ffctl events off",
				Flags:  []cli.Flag{outputFlag()},
				Action: func(c *cli.Context) error { return eventsOff(c, env) },
			},
		},
	}
}

// eventsTail is `ffctl events tail`.
func eventsTail(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("events tail takes no arguments (got %q); use --workflow W", c.Args().First())
	}
	workflow := c.String("workflow")
	if c.IsSet("workflow") {
		if err := core.ValidateName("workflow", workflow); err != nil {
			return usageError("--workflow: %s", strings.TrimPrefix(err.Error(), core.ErrBadWorkflow.Error()+": "))
		}
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	setting, err := tailSetting(c, env, s, workflow)
	if err != nil {
		return err
	}
	log, err := quietLogger(c, env)
	if err != nil {
		return err
	}
	tail, err := broker.DialEventTail(c.Context, brokerConfig(c, log), setting.Exchange, core.StreamBindings(workflow))
	if err != nil {
		if c.Context.Err() != nil {
			return nil
		}
		return failure(err)
	}
	defer tail.Close()
	f := &streamFollower{env: env, s: s, tail: tail, exchange: setting.Exchange}
	for {
		// Wait for an event at most until the next look at the setting.
		next := time.Until(f.checkedAt.Add(tailSettingEvery))
		if next <= 0 {
			if err := f.check(c.Context); err != nil {
				return err
			}
			next = tailSettingEvery
		}
		wait, cancel := context.WithTimeout(c.Context, next)
		body, err := tail.Next(wait)
		cancel()
		switch {
		case c.Context.Err() != nil:
			return nil // interrupted: what was printed stands
		case errors.Is(err, context.DeadlineExceeded):
			continue
		case err != nil:
			return failure(err)
		}
		if err := printTransition(env.Stdout, body, workflow, format); err != nil {
			return err
		}
	}
}

// tailSettingEvery is how often events tail reads the stream's setting to
// follow the exchange it goes to (streamFollower).
const tailSettingEvery = 2 * time.Second

// streamFollower moves events tail to the exchange the stream's setting
// names when that changes (another publisher's --events-exchange), with a
// note on standard error, and notes a stream turned off and on again. A
// tail once stayed on the exchange it started on and went quiet without a
// word (a trial found it).
type streamFollower struct {
	env       *Env
	s         *store.Store
	tail      *broker.EventTail
	exchange  string    // the exchange the tail is bound to
	off       bool      // the stream was off at the last look
	gone      bool      // the exchange did not exist at the last look
	checkedAt time.Time // the last look (zero: none yet)
}

// check reads the setting once (waiting at most tailSettingEvery) and
// follows it. A failed read is left to the next look; a failed move of the tail is returned (events tail ends
// with it as a failure).
func (f *streamFollower) check(ctx context.Context) error {
	f.checkedAt = time.Now()
	// Bounded: the tail prints nothing while it looks, so a database that
	// does not answer must not stop it for longer than a look's period.
	lookCtx, cancel := context.WithTimeout(ctx, tailSettingEvery)
	defer cancel()
	st, err := f.s.StreamSetting(lookCtx)
	switch {
	case errors.Is(err, store.ErrStreamOff):
		if !f.off {
			f.off = true
			fmt.Fprintln(f.env.Stderr, "note: the transition stream was turned off; waiting for it to be on again")
		}
		return nil
	case err != nil:
		return nil
	}
	if f.off {
		f.off = false
		if st.Exchange == f.exchange {
			fmt.Fprintf(f.env.Stderr, "note: the transition stream is on again (exchange %s)\n", f.exchange)
		}
	}
	if st.Exchange == f.exchange {
		return f.keepBound()
	}
	if err := f.tail.Follow(st.Exchange); err != nil {
		return failure(fmt.Errorf("follow the stream to exchange %s: %w", st.Exchange, err))
	}
	fmt.Fprintf(f.env.Stderr, "note: the transition stream now goes to exchange %s (it went to %s); following it (events published there in the 2 s before this note are not shown)\n", st.Exchange, f.exchange)
	f.exchange = st.Exchange
	f.gone = false // a note of the old exchange's return would name the new one
	return nil
}

// keepBound binds the tail to its exchange again, while the setting still
// names it (a move binds to the new one itself): an exchange deleted on
// the broker takes the tail's binding with it, and a publisher declares it
// again with none. It notes on standard error the exchange gone, once, and
// back. Errors: a failure when the broker's connection is lost or the bind
// is refused for another reason than a missing exchange.
func (f *streamFollower) keepBound() error {
	err := f.tail.Rebind()
	switch {
	case errors.Is(err, broker.ErrExchangeGone):
		if !f.gone {
			f.gone = true
			fmt.Fprintf(f.env.Stderr, "note: exchange %s no longer exists on the broker (deleted); nothing is shown until a publisher declares it again\n", f.exchange)
		}
		return nil
	case err != nil:
		return failure(err)
	}
	if f.gone {
		f.gone = false
		fmt.Fprintf(f.env.Stderr, "note: exchange %s exists again; following it (events published there in the 2 s before this note are not shown)\n", f.exchange)
	}
	return nil
}

// tailSetting reads the stream's setting for events tail and, with
// workflow set, notes on standard error a workflow not applied yet (it is
// followed all the same: one applied later streams too). Errors: a usage
// error when the stream is off, a failure when the database fails.
func tailSetting(c *cli.Context, env *Env, s *store.Store, workflow string) (store.StreamSetting, error) {
	setting, err := s.StreamSetting(c.Context)
	if errors.Is(err, store.ErrStreamOff) {
		return setting, usageError("%v", err)
	}
	if err != nil {
		return setting, failure(err)
	}
	if workflow == "" {
		return setting, nil
	}
	_, err = s.GetWorkflow(c.Context, workflow, 0)
	switch {
	case errors.Is(err, store.ErrNotFound):
		fmt.Fprintf(env.Stderr, "note: no workflow %q is applied yet; following its transitions once it is\n", workflow)
	case err != nil:
		return setting, failure(err)
	}
	return setting, nil
}

// printTransition prints one message body of the stream: as a JSON line
// (-o json) or a text line, when its workflow is workflow (any when
// empty). A body that is not a transition event is skipped.
func printTransition(w io.Writer, body []byte, workflow, format string) error {
	e, err := core.DecodeTransitionEvent(body)
	if err != nil || (workflow != "" && e.Workflow != workflow) {
		return nil
	}
	if format == "json" {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", escapeInvisible(b))
		return err
	}
	_, err = io.WriteString(w, transitionLine(e)+"\n")
	return err
}

// transitionLine renders e as a text line (terminal-safe): time, seq,
// kind, workflow[/task] with the run id's first 8 characters, from -> to.
func transitionLine(e core.TransitionEvent) string {
	from := e.From
	if from == "" {
		from = "(new)"
	}
	what := e.Workflow
	if e.Kind == core.TransitionTask {
		what += "/" + e.Task
	}
	run := e.RunID
	if len(run) > 8 {
		run = run[:8]
	}
	line := fmt.Sprintf("%s  %5d  %-4s  %s (%s)  %s -> %s", e.At.Local().Format("2006-01-02 15:04:05.000"), e.Seq, e.Kind, what, run, from, e.To)
	if e.Kind == core.TransitionTask && e.Attempt > 0 {
		line += fmt.Sprintf("  #%d", e.Attempt)
	}
	return core.TerminalText(line)
}

// eventsStatusResult is the JSON of `events status -o json`: the setting
// (exchange, enabled_at and enabled_by empty or null while off), where
// the rows left go while it is off (drain: null while on, or when it has
// not been turned off since migration 29) and the backlog
// (store.StreamStatus).
type eventsStatusResult struct {
	On        bool               `json:"on"`
	Exchange  string             `json:"exchange"`
	EnabledAt *time.Time         `json:"enabled_at"`
	EnabledBy string             `json:"enabled_by"`
	Drain     *store.StreamDrain `json:"drain"`
	store.StreamStatus
}

// eventsStatus is `ffctl events status`.
func eventsStatus(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("events status takes no arguments (got %q)", c.Args().First())
	}
	r, err := query(c, func(ctx context.Context, s *store.Store) (eventsStatusResult, error) {
		var r eventsStatusResult
		setting, err := s.StreamSetting(ctx)
		switch {
		case errors.Is(err, store.ErrStreamOff):
			if r.Drain, err = recordedDrain(ctx, s); err != nil {
				return r, err
			}
		case err != nil:
			return r, err
		default:
			at := setting.EnabledAt.UTC()
			r.On, r.Exchange, r.EnabledAt, r.EnabledBy = true, setting.Exchange, &at, setting.EnabledBy
		}
		r.StreamStatus, err = s.StreamStatus(ctx)
		return r, err
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, r)
	}
	state := "off"
	switch {
	case r.On:
		state = fmt.Sprintf("on, to exchange %s since %s (by %s)", core.TerminalText(r.Exchange), fmtTime(r.EnabledAt), core.TerminalText(r.EnabledBy))
	case r.Drain != nil:
		state = fmt.Sprintf("off since %s (by %s); rows left go to exchange %s", fmtTime(&r.Drain.OffAt), core.TerminalText(r.Drain.OffBy), core.TerminalText(r.Drain.Exchange))
	}
	fmt.Fprintf(env.Stdout, "stream                %s\npending               %d\noldest pending age    %.1fs\npending with errors   %d\n",
		state, r.Pending, r.OldestPendingSeconds, r.Failing)
	if r.Failing > 0 {
		fmt.Fprintf(env.Stdout, "last error            %s\n", firstLine(&r.LastError, 100))
	}
	if !r.On && r.Drain == nil && r.Pending > 0 {
		fmt.Fprintln(env.Stdout, "note: these rows were written before the stream went off (by an older release, which recorded no\n"+
			"exchange for them); only a running publisher started with --events-exchange publishes them")
	}
	return nil
}

// eventsOffResult is the JSON of `events off -o json`: whether the stream
// was on, and where the rows left go (drain: null when it was already off
// and no turn off is recorded).
type eventsOffResult struct {
	WasOn bool               `json:"was_on"`
	Drain *store.StreamDrain `json:"drain"`
}

// eventsOff is `ffctl events off`.
func eventsOff(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("events off takes no arguments (got %q)", c.Args().First())
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	was, err := s.DisableStream(c.Context, actor())
	if err != nil {
		return failure(err)
	}
	r := eventsOffResult{WasOn: was}
	if r.Drain, err = recordedDrain(c.Context, s); err != nil {
		return failure(err)
	}
	switch {
	case format == "json":
		return writeJSON(env.Stdout, r)
	case !was || r.Drain == nil:
		_, err = fmt.Fprintln(env.Stdout, "the transition stream was already off")
	default:
		_, err = fmt.Fprintf(env.Stdout, "the transition stream is off; rows already written still go to exchange %s (a publisher started with --events-exchange turns it on again)\n",
			core.TerminalText(r.Drain.Exchange))
	}
	return err
}

// recordedDrain reads where the rows left go while the stream is off
// (store.StreamDrain, its time in UTC), nil when no turn off is recorded.
func recordedDrain(ctx context.Context, s *store.Store) (*store.StreamDrain, error) {
	d, err := s.StreamDrain(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	d.OffAt = d.OffAt.UTC()
	return &d, nil
}
