package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// eventCommand is `ffctl event`: the events a workflow's wait_for tasks
// wait for (issue 26).
func eventCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "event",
		Usage:     "send the events wait_for tasks wait for, and list those received",
		UsageText: "ffctl event send|list [command options] [arguments...]\n\nExample:\n  ffctl event send order.approved --key 42 --payload '{\"by\": \"ana\"}' --id approval-42\n  ffctl event list --name order.approved",
		Subcommands: []*cli.Command{
			{
				Name:  "send",
				Usage: "send an event: every task waiting for its name and key succeeds with its payload",
				UsageText: "ffctl event send NAME [--key K] [--payload JSON|@FILE|-] [--id EVENT_ID] [--event-lookback D] [-o json]\n\n" +
					"Every task RUNNING in a wait_for of event NAME whose key is K succeeds at once, the payload\n" +
					"its result (one transaction). The event is kept for --event-lookback: a wait for it that\n" +
					"starts before then succeeds as it starts. The same --id sent twice is delivered once: the\n" +
					"second send says when the first was received and sends nothing (exit 0), so a retry is safe.\n" +
					"Prints the event's id and the task runs it completed.\n\n" +
					"Example:\n  ffctl event send order.approved --key 42 --payload '{\"by\": \"ana\"}' --id approval-42\n" +
					"  ffctl event send invoice.paid --key INV-7 --payload @paid.json --event-lookback 7d -o json",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "key", Usage: "the key a waiting task's wait_for.key must give (default none: the waits without a key)"},
					&cli.StringFlag{Name: "payload", Usage: "the event's payload, a JSON object, the result of each task it completes: inline JSON, @FILE to read a file, or - (or @-) for standard input (default {})"},
					&cli.StringFlag{Name: "id", Usage: "the event's id: the same id sent twice is delivered once (default a new UUID)"},
					&cli.StringFlag{Name: "event-lookback", Usage: "keep the event this long for a wait that starts after it, such as 24h or 7d (at most 366d)", Value: "24h"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return eventSend(c, env) },
			},
			{
				Name:  "list",
				Usage: "list the events received, newest first, with the task runs each completed",
				UsageText: "ffctl event list [--name NAME] [--key K] [--limit N] [-o json]\n\n" +
					"KEPT UNTIL is when the event's lookback ends: a wait that starts before then gets it.\n" +
					"TASK RUNS names each task run it completed as RUN_ID_PREFIX/TASK (-o json: every delivery whole).\n\n" +
					"Example:\n  ffctl event list --name order.approved --key 42\n  ffctl event list --limit 10 -o json",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Usage: "only events of this name"},
					&cli.StringFlag{Name: "key", Usage: "only events sent with this key (--key '': those sent without one)"},
					&cli.IntFlag{Name: "limit", Value: store.ListEventsDefault, Usage: fmt.Sprintf("at most this many (1 to %d)", store.ListEventsMax)},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return eventList(c, env) },
			},
		},
	}
}

// eventSendArgs is what `event send` was given, checked.
type eventSendArgs struct {
	name string
	opts client.SendEventOptions
	// payload is the event's JSON object.
	payload json.RawMessage
}

// parseEventSend checks the arguments and flags of `event send`, before
// the database is opened. Errors (usage, naming the flag): not one name,
// a name, key, id or lookback the store would refuse, a payload that
// cannot be read or is not a JSON object core.ValidateParams takes.
func parseEventSend(c *cli.Context, env *Env) (eventSendArgs, error) {
	var a eventSendArgs
	if c.NArg() != 1 {
		return a, usageError("event send takes one event name (got %d arguments)", c.NArg())
	}
	a.name = c.Args().First()
	if err := core.ValidateEventName(a.name); err != nil {
		return a, usageError("%v", err)
	}
	a.opts = client.SendEventOptions{Key: c.String("key"), ID: c.String("id"), Actor: actor()}
	if err := core.ValidateEventKey(a.opts.Key); err != nil {
		return a, usageError("--key: %v", err)
	}
	if c.IsSet("id") {
		if err := store.ValidateEventID(a.opts.ID); err != nil {
			return a, usageError("--id: %v", err)
		}
	}
	var err error
	if a.opts.Lookback, err = eventLookback(c.String("event-lookback")); err != nil {
		return a, err
	}
	a.payload, err = eventPayload(c, env)
	return a, err
}

// eventLookback parses --event-lookback: a duration with days
// (core.ParseDuration) that store.ValidateEventLookback takes.
func eventLookback(s string) (time.Duration, error) {
	d, err := core.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, usageError("--event-lookback: %v", err)
	}
	if store.ValidateEventLookback(d) != nil {
		return 0, usageError("--event-lookback %s: must be positive and at most %dd, such as 24h or 7d", s, store.EventLookbackMax/(24*time.Hour))
	}
	return d, nil
}

// eventPayload reads --payload: inline JSON text, @FILE a file (@- and -
// standard input, readInput), {} when the flag is absent. Errors (usage):
// the file cannot be read; the text is not a JSON object
// core.ValidateParams takes (not JSON, not an object, a NUL character,
// over core.MaxParamsBytes, a key twice), in its words.
func eventPayload(c *cli.Context, env *Env) (json.RawMessage, error) {
	if !c.IsSet("payload") {
		return json.RawMessage(`{}`), nil
	}
	v := c.String("payload")
	flag, data := "--payload", []byte(v)
	if path, ok := strings.CutPrefix(v, "@"); ok || v == "-" {
		if !ok {
			path = "-"
		}
		var err error
		if data, err = readInput(env, path); err != nil {
			return nil, err
		}
		flag = "--payload " + v
	}
	if err := core.ValidateParams(data); err != nil {
		return nil, usageError("%s: %s", flag, strings.TrimPrefix(err.Error(), core.ErrBadParams.Error()+": "))
	}
	return data, nil
}

// eventSend is the action of `ffctl event send NAME`: the event sent
// through the client, then what it did printed (printSent, or the result
// with -o json). A duplicate id exits 0.
func eventSend(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	a, err := parseEventSend(c, env)
	if err != nil {
		return err
	}
	res, err := withClient(c, client.Options{}, func(ctx context.Context, cl *client.Client) (client.SendEventResult, error) {
		return cl.SendEvent(ctx, a.name, a.payload, a.opts)
	})
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown) && c.IsSet("id"):
		return failure(fmt.Errorf("%w: the event may have been received; send it again with the same --id, which delivers it once", err))
	case errors.Is(err, client.ErrOutcomeUnknown):
		return failure(fmt.Errorf("%w: the event may have been received; check with `ffctl event list --name %s` before sending it again (an --id makes a retry safe)", err, a.name))
	case err != nil:
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, res)
	}
	return printSent(env, res, a)
}

// printSent writes what a send did: the event's id, name and key, then
// the task runs it completed; for a duplicate, when the first was received
// and what it completed then.
func printSent(env *Env, res client.SendEventResult, a eventSendArgs) error {
	ev := res.Event
	what := fmt.Sprintf("event %s (%s, %s)", ev.ID, ev.Name, keyText(ev.Key))
	var line, then string
	switch {
	case res.Duplicate:
		line = fmt.Sprintf("%s: already received at %s, delivered once: nothing sent again", what, fmtTime(&ev.ReceivedAt))
		if ev.Name != a.name || ev.Key != a.opts.Key {
			line += fmt.Sprintf(" (this send named %s, %s: ignored, as an id names one event)", a.name, keyText(a.opts.Key))
		}
		then = fmt.Sprintf("it completed %s then:", plural(len(ev.Deliveries), "task run"))
	case len(res.Completed) == 0:
		line = fmt.Sprintf("%s sent: no task was waiting for it; kept until %s for a wait that starts before then", what, fmtTime(&ev.KeepUntil))
	default:
		line = fmt.Sprintf("%s sent: completed %s; kept until %s for a wait that starts before then", what, plural(len(res.Completed), "waiting task run"), fmtTime(&ev.KeepUntil))
	}
	fmt.Fprintln(env.Stdout, core.TerminalText(line))
	ds := res.Completed
	if res.Duplicate {
		ds = ev.Deliveries
		if len(ds) > 0 {
			fmt.Fprintln(env.Stdout, then)
		}
	}
	return deliveriesTable(env.Stdout, env.colours(), ds)
}

// deliveriesTable prints ds as a table (nothing for none).
func deliveriesTable(w io.Writer, p colours, ds []client.EventDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	tw := newTable(w, p, "RUN ID", "WORKFLOW", "TASK", "TASK RUN ID")
	for _, d := range ds {
		tw.row(d.RunID.String(), d.Workflow, d.Task, d.TaskRunID.String())
	}
	return tw.flush()
}

// keyText names an event's key in a sentence: `key "42"`, or "no key".
func keyText(key string) string {
	if key == "" {
		return "no key"
	}
	return "key " + strconv.Quote(key)
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// eventList is the action of `ffctl event list`: the events received,
// newest first, as a table or (-o json) as client.Event objects with
// their deliveries whole.
func eventList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	f, err := parseEventFilter(c)
	if err != nil {
		return err
	}
	evs, err := withClient(c, client.Options{}, func(ctx context.Context, cl *client.Client) ([]client.Event, error) {
		return cl.ListEvents(ctx, f)
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, evs)
	}
	tw := newTable(env.Stdout, env.colours(), "ID", "NAME", "KEY", "RECEIVED", "KEPT UNTIL", "COMPLETED", "TASK RUNS")
	for _, e := range evs {
		key := "-"
		if e.Key != "" {
			key = clip(core.TerminalText(e.Key), eventCellMax)
		}
		tw.row(clip(core.TerminalText(e.ID), eventCellMax), e.Name, key, fmtTime(&e.ReceivedAt), fmtTime(&e.KeepUntil),
			strconv.Itoa(len(e.Deliveries)), taskRunsText(e.Deliveries))
	}
	return tw.flush()
}

// parseEventFilter checks the arguments and flags of `event list`. Errors
// (usage): an argument, a bad --name or --key, a --limit out of 1 to
// store.ListEventsMax.
func parseEventFilter(c *cli.Context) (client.EventFilter, error) {
	f := client.EventFilter{Name: c.String("name"), Limit: c.Int("limit")}
	if c.NArg() != 0 {
		return f, usageError("event list takes no arguments (got %q; filter with --name and --key)", c.Args().First())
	}
	if c.IsSet("name") {
		if err := core.ValidateEventName(f.Name); err != nil {
			return f, usageError("--name: %v", err)
		}
	}
	if c.IsSet("key") {
		key := c.String("key")
		if err := core.ValidateEventKey(key); err != nil {
			return f, usageError("--key: %v", err)
		}
		f.Key = &key
	}
	if f.Limit < 1 || f.Limit > store.ListEventsMax {
		return f, usageError("--limit %d: must be between 1 and %d", f.Limit, store.ListEventsMax)
	}
	return f, nil
}

// eventCellMax bounds the runes of an event's id and key in a table cell
// (-o json has them whole); taskRunsShown the task runs named in one.
const (
	eventCellMax  = 40
	taskRunsShown = 3
)

// taskRunsText names the task runs an event completed, as RUN_ID_PREFIX/
// TASK (a prefix ffctl run show takes), the first taskRunsShown of them
// and how many more; "-" for none.
func taskRunsText(ds []client.EventDelivery) string {
	if len(ds) == 0 {
		return "-"
	}
	var parts []string
	for _, d := range ds[:min(len(ds), taskRunsShown)] {
		parts = append(parts, d.RunID.String()[:8]+"/"+d.Task)
	}
	if more := len(ds) - taskRunsShown; more > 0 {
		parts = append(parts, fmt.Sprintf("+%d more", more))
	}
	return strings.Join(parts, ", ")
}

// clip cuts s to at most n runes, the last one "…" when it was longer.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
