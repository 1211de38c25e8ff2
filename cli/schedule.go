package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// scheduleFireTimesShown is how many next fire times `schedule show`
// prints.
const scheduleFireTimesShown = 5

// scheduleCommand is `ffctl schedule`: each subcommand comes from a
// function of its own; pause, resume, delete and trigger-now are
// scheduleActionCommands.
func scheduleCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "schedule",
		Usage: "start runs of a workflow on a cron schedule",
		UsageText: "ffctl schedule create|list|show|pause|resume|delete|trigger-now [command options] [arguments...]\n\n" +
			"Example:\n  ffctl schedule create nightly --workflow nightly-report --cron '30 2 * * *' --timezone Europe/Berlin\n" +
			"  ffctl schedule show nightly\n  ffctl schedule pause nightly --reason 'report source down'",
		Subcommands: []*cli.Command{
			scheduleCreateCommand(env),
			scheduleListCommand(env),
			scheduleShowCommand(env),
			scheduleActionCommand(env, "pause", "why the schedule is paused", "pause a schedule: it fires no tick until resumed (audited)",
				"A paused schedule fires no tick; `schedule trigger-now` still starts a run.", schedulePause),
			scheduleActionCommand(env, "resume", "why the schedule is resumed", "resume a paused schedule (audited)",
				"The ticks it would have fired while paused are not caught up: the next tick is the next fire time.", scheduleResume),
			scheduleActionCommand(env, "delete", "why the schedule is deleted", "delete a schedule and its ticks; its runs stay (audited)",
				"The audit trail of the schedule outlives it.", scheduleDelete),
			scheduleActionCommand(env, "trigger-now", "why the schedule is triggered now", "start a run of a schedule now, outside its cron (audited)",
				"The run has the schedule's workflow (newest version) and params; it is recorded as a manual tick,\n"+
					"also when the schedule is paused, and its overlap policy is not applied. A workflow paused in\n"+
					"drop mode records the tick as dropped, starts nothing, and exits 3 (as `run trigger` does).", scheduleTriggerNow),
		},
	}
}

// scheduleCreateCommand is `ffctl schedule create`.
func scheduleCreateCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "create",
		Usage: "create a schedule",
		UsageText: "ffctl schedule create NAME --workflow W --cron EXPR [--timezone Z] [--param k=v]... [--params-file F]\n" +
			"    [--overlap skip|allow|cancel-previous] [--catchup none|one|all --catchup-window D] [--jitter D] [-o json]\n\n" +
			"EXPR is a cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds\n" +
			"first, or @hourly, @daily, @weekly, @monthly, @yearly, @every D. It is read in --timezone (an IANA\n" +
			"zone, default UTC) with its DST rules: a time that does not exist that day does not fire, one that\n" +
			"occurs twice fires twice. Each tick starts a run of the workflow's newest version.\n" +
			"--overlap: while the previous run is open, skip the tick (default), start anyway (allow), or\n" +
			"cancel the previous run and start (cancel-previous).\n" +
			"--catchup: ticks missed while no scheduler ran are dropped (none, default), the latest one within\n" +
			"--catchup-window fires (one), or all within it fire, oldest first (all); --catchup-window applies\n" +
			"only with --catchup one or all.\n" +
			"--jitter: each tick's run starts up to this long after its time (the same delay on every scheduler).\n\n" +
			"Example:\n  ffctl schedule create nightly --workflow nightly-report --cron '30 2 * * *' --timezone Europe/Berlin \\\n" +
			"    --param region=eu --catchup one --catchup-window 6h",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workflow", Usage: "the workflow each tick starts (its newest version)"},
			&cli.StringFlag{Name: "cron", Usage: "cron expression (5 fields, 6 with seconds, or @hourly, @daily, ..., @every D)"},
			&cli.StringFlag{Name: "timezone", Value: "UTC", Usage: "IANA time zone the expression is read in"},
			&cli.StringSliceFlag{Name: "param", Aliases: []string{"p"}, Usage: "run param key=value (a string); repeatable; overrides --params-file"},
			&cli.StringFlag{Name: "params-file", Usage: "JSON object file of run params; - reads standard input"},
			&cli.StringFlag{Name: "overlap", Value: string(schedule.OverlapSkip), Usage: "while the previous run is open: skip, allow or cancel-previous"},
			&cli.StringFlag{Name: "catchup", Value: string(schedule.CatchupNone), Usage: "missed ticks: none, one (the latest within --catchup-window) or all (within it)"},
			ageFlag("catchup-window", "with --catchup one|all (only): how far back a missed tick may still fire"),
			ageFlag("jitter", "start each tick's run up to this long after its time"),
			reasonFlag(optionalReason),
			outputFlag(),
		},
		Action: func(c *cli.Context) error { return scheduleCreate(c, env) },
	}
}

// scheduleListCommand is `ffctl schedule list`.
func scheduleListCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list schedules with their next fire time and last tick",
		UsageText: "ffctl schedule list [-o json]\n\nExample:\n  ffctl schedule list -o json | jq -r '.[] | select(.paused) | .name'",
		Flags:     []cli.Flag{outputFlag()},
		Action:    func(c *cli.Context) error { return scheduleList(c, env) },
	}
}

// scheduleShowCommand is `ffctl schedule show`.
func scheduleShowCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "show a schedule, its next five fire times and its last ten ticks",
		UsageText: "ffctl schedule show NAME [-o json]\n\n" +
			"The fire times are given in the schedule's zone and in UTC; each tick with its run's state.\n\n" +
			"Example:\n  ffctl schedule show nightly -o json",
		Flags:  []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error { return scheduleShow(c, env) },
	}
}

// scheduleActionCommand is `ffctl schedule VERB NAME --reason R`, whose
// action is do (see scheduleAction): usage is its one-line usage, more
// what its help adds, why the --reason flag's usage.
func scheduleActionCommand(env *Env, verb, why, usage, more string, do func(ctx context.Context, s *store.Store, name, reason string) (any, string, error)) *cli.Command {
	return &cli.Command{
		Name:  verb,
		Usage: usage,
		UsageText: "ffctl schedule " + verb + " NAME --reason R [-o json]\n\n" + more + "\n\n" +
			"Example:\n  ffctl schedule " + verb + " nightly --reason 'maintenance window, ticket 42'",
		Flags:  []cli.Flag{reasonFlag(requiredReason(why)), outputFlag()},
		Action: func(c *cli.Context) error { return scheduleAction(c, env, verb, why, do) },
	}
}

// schedulePause is `schedule pause`: it says whether the schedule was
// paused already.
func schedulePause(ctx context.Context, s *store.Store, name, reason string) (any, string, error) {
	changed, err := s.PauseSchedule(ctx, name, actor(), reason)
	msg := fmt.Sprintf("schedule %s paused: it fires no tick until resumed", name)
	if !changed {
		msg = fmt.Sprintf("schedule %s is already paused; nothing changed", name)
	}
	return map[string]any{"schedule": name, "paused": true, "changed": changed}, msg, err
}

// scheduleResume is `schedule resume`: it says whether the schedule was
// paused; the ticks of the pause are not caught up.
func scheduleResume(ctx context.Context, s *store.Store, name, reason string) (any, string, error) {
	changed, err := s.ResumeSchedule(ctx, name, actor(), reason)
	msg := fmt.Sprintf("schedule %s resumed: the ticks of the pause are not caught up", name)
	if !changed {
		msg = fmt.Sprintf("schedule %s is not paused; nothing to resume", name)
	}
	return map[string]any{"schedule": name, "paused": false, "changed": changed}, msg, err
}

// scheduleDelete is `schedule delete` (its runs stay).
func scheduleDelete(ctx context.Context, s *store.Store, name, reason string) (any, string, error) {
	err := s.DeleteSchedule(ctx, name, actor(), reason)
	return map[string]any{"schedule": name, "deleted": true}, fmt.Sprintf("schedule %s deleted (its runs stay)", name), err
}

// scheduleTriggerNow is `schedule trigger-now`: a manual tick, whose run
// (or drop, when its workflow is paused in drop mode) it names.
func scheduleTriggerNow(ctx context.Context, s *store.Store, name, reason string) (any, string, error) {
	tick, err := s.TriggerScheduleNow(ctx, name, actor(), reason)
	if err != nil && tick.ID != 0 {
		return nil, "", fmt.Errorf("%w (recorded as a failed tick: ffctl schedule show %s)", err, name)
	}
	if err != nil {
		return nil, "", err
	}
	msg := fmt.Sprintf("schedule %s: run %s started now (outside the cron)", name, uuidOrDash(tick))
	if tick.Outcome == store.TickDropped {
		msg = fmt.Sprintf("schedule %s: no run: %s", name, tick.Reason)
	}
	return scheduleTickJSON{Schedule: name, Tick: tick}, msg, nil
}

// scheduleTickJSON is a tick with its schedule's name (trigger-now's -o
// json).
type scheduleTickJSON struct {
	Schedule string `json:"schedule"`
	store.Tick
}

func uuidOrDash(t store.Tick) string {
	if t.RunID == nil {
		return "-"
	}
	return t.RunID.String()
}

// scheduleName reads the one schedule name argument of cmd.
func scheduleName(c *cli.Context, cmd string) (string, error) {
	if c.NArg() != 1 {
		return "", usageError("schedule %s takes one schedule name", cmd)
	}
	name := c.Args().First()
	if _, err := schedule.Validate(schedule.Definition{Name: name, Workflow: "x", Cron: "@daily"}); err != nil {
		return "", usageError("%v", err)
	}
	return name, nil
}

// durationFlag parses an optional duration flag with parseAgeOrZero (a
// zero age, however spelt, is 0).
func durationFlag(c *cli.Context, name string) (time.Duration, error) {
	v := strings.TrimSpace(c.String(name))
	if !c.IsSet(name) {
		return 0, nil
	}
	d, err := parseAgeOrZero(v)
	if err != nil {
		return 0, usageError("--%s %v", name, err)
	}
	return d, nil
}

func scheduleCreate(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := scheduleName(c, "create")
	if err != nil {
		return err
	}
	for _, f := range []string{"workflow", "cron"} {
		if strings.TrimSpace(c.String(f)) == "" {
			return usageError("--%s is required", f)
		}
	}
	params, err := buildParams(c, env)
	if err != nil {
		return err
	}
	spec := schedule.Definition{
		Name: name, Workflow: c.String("workflow"), Cron: c.String("cron"), Timezone: c.String("timezone"), Params: params,
		Overlap: schedule.Overlap(c.String("overlap")), Catchup: schedule.Catchup(c.String("catchup")), Owner: schedule.OwnerCLI,
	}
	if spec.CatchupWindow, err = durationFlag(c, "catchup-window"); err != nil {
		return err
	}
	if spec.Jitter, err = durationFlag(c, "jitter"); err != nil {
		return err
	}
	if _, err := schedule.Validate(spec); err != nil {
		return usageError("%v", err)
	}
	sc, err := query(c, func(ctx context.Context, s *store.Store) (store.Schedule, error) {
		return s.CreateSchedule(ctx, spec, actor(), strings.TrimSpace(c.String("reason")))
	})
	if errors.Is(err, core.ErrBadParams) {
		// The params do not fit the workflow (a task key needs a param):
		// bad input.
		return usageError("%v", err)
	}
	if err != nil {
		return err
	}
	next := nextFires(sc, 1)
	if format == "json" {
		return writeJSON(env.Stdout, scheduleListJSON{Schedule: sc, NextFireAt: firstOrNil(next)})
	}
	fmt.Fprintf(env.Stdout, "schedule %s created: %s (%s) starts %s; next fire %s\n", sc.Name, sc.Cron, sc.Timezone, sc.Workflow, fireText(next))
	return nil
}

// nextFires is sc's next n fire times at its read time (the database's
// clock), in its zone, as the dashboard shows them too
// (schedule.ShownFireTimes: the ticks the scheduler fires next, from its
// last-fired point; none while it is paused); none when its spec no
// longer parses.
func nextFires(sc store.Schedule, n int) []time.Time {
	w, err := sc.Window()
	if err != nil {
		return nil
	}
	return schedule.ShownFireTimes(w, sc.Paused, sc.ReadAt, n)
}

func firstOrNil(ts []time.Time) *time.Time {
	if len(ts) == 0 {
		return nil
	}
	t := ts[0].UTC()
	return &t
}

func fireText(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[0].Format(time.RFC3339) + " (" + ts[0].UTC().Format(time.RFC3339) + ")"
}

// scheduleListJSON is a schedule of `schedule list -o json`: the stored
// schedule (with its last tick) and its next fire time in UTC (null when
// paused).
type scheduleListJSON struct {
	store.Schedule
	NextFireAt *time.Time `json:"next_fire_at"`
}

func scheduleList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("schedule list takes no arguments")
	}
	scheds, err := query(c, func(ctx context.Context, s *store.Store) ([]store.Schedule, error) { return s.ListSchedules(ctx) })
	if err != nil {
		return err
	}
	out := make([]scheduleListJSON, len(scheds))
	for i, sc := range scheds {
		out[i] = scheduleListJSON{Schedule: sc, NextFireAt: firstOrNil(nextFires(sc, 1))}
	}
	if format == "json" {
		return writeJSON(env.Stdout, out)
	}
	tw := newTable(env.Stdout, env.colours(), "NAME", "WORKFLOW", "CRON", "ZONE", "PAUSED", "NEXT FIRE (UTC)", "LAST TICK", "OUTCOME", "RUN STATE")
	for _, sc := range out {
		next, last, outcome, state := "-", "-", "-", "-"
		if sc.NextFireAt != nil {
			next = sc.NextFireAt.Format(time.RFC3339)
		}
		if len(sc.Ticks) > 0 {
			t := sc.Ticks[0]
			last, outcome, state = t.ScheduledAt.UTC().Format(time.RFC3339), string(t.Outcome), dashIfEmpty(t.RunState)
		}
		tw.row(sc.Name, sc.Workflow, sc.Cron, sc.Timezone, yesNo(sc.Paused), next, last, outcome, state)
	}
	return tw.flush()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// fireTimeJSON is one next fire time of `schedule show -o json`: in the
// schedule's zone and in UTC.
type fireTimeJSON struct {
	Local string `json:"local"`
	UTC   string `json:"utc"`
}

// scheduleShowJSON is `schedule show -o json`: the schedule with its last
// ten ticks and its next five fire times (empty when paused).
type scheduleShowJSON struct {
	store.Schedule
	NextFireTimes []fireTimeJSON `json:"next_fire_times"`
}

func scheduleShow(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := scheduleName(c, "show")
	if err != nil {
		return err
	}
	sc, err := query(c, func(ctx context.Context, s *store.Store) (store.Schedule, error) { return s.GetSchedule(ctx, name) })
	if err != nil {
		return err
	}
	out := scheduleShowJSON{Schedule: sc, NextFireTimes: []fireTimeJSON{}}
	for _, t := range nextFires(sc, scheduleFireTimesShown) {
		out.NextFireTimes = append(out.NextFireTimes, fireTimeJSON{Local: t.Format(time.RFC3339), UTC: t.UTC().Format(time.RFC3339)})
	}
	if format == "json" {
		return writeJSON(env.Stdout, out)
	}
	w := env.Stdout
	catchup := string(sc.Catchup)
	if sc.Catchup != schedule.CatchupNone {
		catchup += " within " + sc.CatchupWindow.String()
	}
	for _, kv := range [][2]string{
		{"schedule", sc.Name}, {"workflow", sc.Workflow}, {"cron", sc.Cron + " (" + sc.Timezone + ")"}, {"params", string(sc.Params)},
		{"overlap", string(sc.Overlap)}, {"catch-up", catchup}, {"jitter", sc.Jitter.String()}, {"paused", yesNo(sc.Paused)},
		{"owner", string(sc.Owner)}, {"created", fmtTime(&sc.CreatedAt)},
	} {
		fmt.Fprintf(w, "%-9s %s\n", kv[0]+":", core.TerminalText(kv[1]))
	}
	fmt.Fprintf(w, "\nnext fire times (%s / UTC):\n", core.TerminalText(sc.Timezone))
	if len(out.NextFireTimes) == 0 {
		fmt.Fprintln(w, "  - (paused)")
	}
	for _, t := range out.NextFireTimes {
		fmt.Fprintf(w, "  %s  %s\n", t.Local, t.UTC)
	}
	fmt.Fprintf(w, "\nlast ticks:\n")
	if len(sc.Ticks) == 0 {
		fmt.Fprintln(w, "  - (none yet)")
		return nil
	}
	tw := newTable(w, env.colours(), "SCHEDULED (UTC)", "FIRED", "OUTCOME", "RUN ID", "STATE", "REASON")
	for _, t := range sc.Ticks {
		when := t.ScheduledAt.UTC().Format(time.RFC3339)
		if t.Manual {
			when += " (now)"
		}
		reason := t.Reason
		tw.row(when, fmtTime(&t.FiredAt), string(t.Outcome), uuidOrDash(t), dashIfEmpty(t.RunState), firstLine(&reason, 60))
	}
	return tw.flush()
}

// scheduleAction is pause, resume, delete and trigger-now: the name, the
// audit reason (asked for on a terminal), then do; it prints do's JSON
// value or its message (on standard output), then exits 3 (ExitPaused)
// when the result is a tick its workflow's drop-mode pause dropped.
func scheduleAction(c *cli.Context, env *Env, verb, why string, do func(ctx context.Context, s *store.Store, name, reason string) (any, string, error)) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := scheduleName(c, verb)
	if err != nil {
		return err
	}
	reason, err := auditReason(c, env, bufio.NewReader(env.Stdin), verb, why)
	if err != nil {
		return err
	}
	type result struct {
		v   any
		msg string
	}
	res, err := query(c, func(ctx context.Context, s *store.Store) (result, error) {
		v, msg, err := do(ctx, s, name, reason)
		return result{v, msg}, err
	})
	if err != nil {
		return err
	}
	if format == "json" {
		err = writeJSON(env.Stdout, res.v)
	} else {
		fmt.Fprintln(env.Stdout, core.TerminalText(res.msg))
	}
	if tick, ok := res.v.(scheduleTickJSON); ok && err == nil && tick.Outcome == store.TickDropped {
		return &ExitError{Code: ExitPaused, Err: fmt.Errorf("schedule %s: no run was started: its workflow is paused with mode drop (the tick is recorded dropped)", name)}
	}
	return err
}
