package cli

// This file holds `workflow show`: a stored version, each task's effective
// retry policy and timeout, its expressions and its sleep, wait_for or
// workflow block, and the workflow's rollbacks.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// shownWorkflow is what `workflow show` reads: the version and the
// workflow's audit.
type shownWorkflow struct {
	wf     store.Workflow
	events []store.WorkflowEvent
}

func workflowShow(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError("workflow show takes one workflow name")
	}
	if err := core.ValidateName("workflow", c.Args().First()); err != nil {
		return usageError("%v", err)
	}
	version, err := versionFlag(c)
	if err != nil {
		return err
	}
	shown, err := query(c, func(ctx context.Context, s *store.Store) (shownWorkflow, error) {
		wf, err := s.GetWorkflow(ctx, c.Args().First(), version)
		if err != nil {
			return shownWorkflow{}, err
		}
		evs, err := s.WorkflowEvents(ctx, wf.Name)
		return shownWorkflow{wf: wf, events: evs}, err
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, newWorkflowJSON(shown.wf, shown.events))
	}
	return writeWorkflowTable(env, shown)
}

// writeWorkflowTable is `workflow show`'s table: the version, its tasks
// with their effective retry policy and timeout ("(default)": not set in
// the file), and the workflow's rollbacks.
func writeWorkflowTable(env *Env, shown shownWorkflow) error {
	wf := shown.wf
	fmt.Fprintf(env.Stdout, "workflow %s version %d (created %s)\n", wf.Name, wf.Version, fmtTime(&wf.CreatedAt))
	if wf.Definition.Description != "" {
		fmt.Fprintf(env.Stdout, "%s\n", core.TerminalText(wf.Definition.Description))
	}
	tw := newTable(env.Stdout, env.colours(), "TASK", "HANDLER", "DEPENDS ON", "MAX ATTEMPTS", "BACKOFF INITIAL", "BACKOFF MAX", "TIMEOUT")
	for _, t := range wf.Definition.Tasks {
		deps := "-"
		if len(t.DependsOn) > 0 {
			deps = fmt.Sprint(t.DependsOn)
		}
		e := effectiveOf(t)
		handler := t.Handler
		if handler == "" { // a sleep, a wait or a child run: the scheduler holds it
			handler = "-"
		}
		tw.row(t.Name, handler, deps, e.cell("max_attempts", strconv.Itoa(e.MaxAttempts)),
			e.cell("initial_backoff", fmtDuration(time.Duration(e.InitialBackoff))),
			e.cell("max_backoff", fmtDuration(time.Duration(e.MaxBackoff))), e.cell("timeout", e.timeoutText()))
	}
	if err := tw.flush(); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "Retry n waits a random time in [0, min(max, initial × 2^(n-1))] (full jitter); (default): not set in the file.\n")
	if l := runConcurrencyLine(wf.Definition); l != "" {
		fmt.Fprintf(env.Stdout, "%s\n", core.TerminalText(l))
	}
	for _, t := range wf.Definition.Tasks {
		for _, l := range languageLines(t) {
			fmt.Fprintf(env.Stdout, "%s: %s\n", t.Name, core.TerminalText(l))
		}
	}
	for _, ev := range shown.events {
		fmt.Fprintf(env.Stdout, "%s\n", rollbackLine(ev))
	}
	return nil
}

// rollbackLine is one rollback as `workflow show` and `workflow rollback`
// print it.
func rollbackLine(ev store.WorkflowEvent) string {
	return fmt.Sprintf("version %d: rollback of version %d by %s at %s: %s", ev.Version, ev.ToVersion,
		core.TerminalText(ev.Actor), fmtTime(&ev.At), core.TerminalText(ev.Reason))
}

// fmtDuration writes d as a Go duration without trailing zero units
// ("1m", not "1m0s"), whole days first as workflow files may write them
// ("7d", "1d12h").
func fmtDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day {
		days := fmt.Sprintf("%dd", d/day)
		if d%day == 0 {
			return days
		}
		return days + fmtDuration(d%day)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// effectiveJSON is one task's retry policy and timeout as the engine
// applies them (core.TaskDef.Policy, core.TaskDef.TimeoutOrZero): the
// file's values, else the defaults (core.RetryPolicyDefault; no timeout).
type effectiveJSON struct {
	Task        string `json:"task"`
	MaxAttempts int    `json:"max_attempts"`
	// InitialBackoff and MaxBackoff bound the delays between attempts
	// (Go durations); Jitter is how a delay is drawn: "full", uniform in
	// [0, min(max_backoff, initial_backoff × 2^(n-1))].
	InitialBackoff core.Duration `json:"initial_backoff"`
	MaxBackoff     core.Duration `json:"max_backoff"`
	Jitter         string        `json:"jitter"`
	// Timeout bounds one attempt; null means none.
	Timeout *core.Duration `json:"timeout"`
	// Defaulted names the fields above the file does not set (their
	// values are the defaults, or follow from the other backoff bound).
	Defaulted []string `json:"defaulted"`
	// Kind is who runs the task: "task" (a worker) or "for_each" (the
	// scheduler expands it into one task run per element).
	Kind core.TaskKind `json:"kind"`
	// TriggerRule is the task's trigger rule (all_success by default).
	TriggerRule core.TriggerRule `json:"trigger_rule"`
	// When and ForEach are the task's expressions ("" for none); MaxItems
	// bounds ForEach's list (null without ForEach).
	When      string `json:"when"`
	ForEach   string `json:"for_each"`
	MaxItems  *int   `json:"max_items"`
	OnFailure bool   `json:"on_failure"`
	// WaitTimeout and OnTimeout are a wait's timeout (core.MaxWait when
	// the file sets none) and what it does ("fail" when the file sets
	// nothing); null for any other kind.
	WaitTimeout *core.Duration `json:"wait_timeout"`
	OnTimeout   *string        `json:"on_timeout"`
}

// languageLines are what `workflow show` says under its table of a task's
// when, trigger rule, on_failure, for_each and its sleep, wait_for or
// workflow block: one line each, none for a plain task.
func languageLines(t core.TaskDef) []string {
	var out []string
	if t.ForEach != "" {
		out = append(out, fmt.Sprintf("for_each %s (at most %d elements)", t.ForEach, t.MaxItemsOrDefault()))
	}
	if t.When != "" {
		out = append(out, "when "+t.When)
	}
	if t.TriggerRule != "" {
		out = append(out, "trigger_rule "+t.TriggerRule)
	}
	if t.OnFailure {
		out = append(out, "on_failure: runs only when the run fails")
	}
	if l := heldDefLine(t); l != "" {
		out = append(out, l)
	}
	if c := t.Concurrency; c != nil {
		out = append(out, fmt.Sprintf("concurrency key %s, limit %d", c.Key, c.Limit))
	}
	if r := t.RateLimit; r != nil {
		out = append(out, fmt.Sprintf("rate_limit key %s, %d per %s", r.Key, r.Limit, fmtDuration(time.Duration(r.Per))))
	}
	if t.Priority != nil {
		out = append(out, fmt.Sprintf("priority %d", *t.Priority))
	} else if t.Flow() {
		out = append(out, fmt.Sprintf("priority %d (default)", t.PriorityOrDefault()))
	}
	return out
}

// runConcurrencyLine is what `workflow show` says of a workflow's
// run-level `concurrency` block, its default strategy marked; "" for a
// workflow without one.
func runConcurrencyLine(d core.Definition) string {
	c := d.Concurrency
	if c == nil {
		return ""
	}
	strategy := c.Strategy
	if strategy == "" {
		strategy = c.StrategyOrDefault() + " (default)"
	}
	return fmt.Sprintf("runs: concurrency key %s, limit %d open runs, strategy %s", c.Key, c.Limit, strategy)
}

// heldDefLine is what `workflow show` says of a task's sleep, wait_for or
// workflow block, the defaults the engine applies marked "(default)";
// "" for a task with none.
func heldDefLine(t core.TaskDef) string {
	switch {
	case t.Sleep != nil && t.Sleep.For != nil:
		return "sleep for " + fmtDuration(time.Duration(*t.Sleep.For))
	case t.Sleep != nil:
		return "sleep until " + t.Sleep.Until
	case t.WaitFor != nil:
		w := t.WaitFor
		key := "without a key"
		if w.Key != "" {
			key = "key " + w.Key
		}
		timeout := fmtDuration(w.WaitTimeout())
		if w.Timeout == nil {
			timeout += " (default)"
		}
		onTimeout := w.OnTimeout
		if onTimeout == "" {
			onTimeout = core.OnTimeoutFail + " (default)"
		}
		return fmt.Sprintf("wait_for event %s %s, timeout %s, on_timeout %s", w.Event, key, timeout, onTimeout)
	case t.Workflow != nil:
		params := "{} (default)"
		if t.Workflow.Params != "" {
			params = t.Workflow.Params
		}
		return fmt.Sprintf("workflow %s (its newest version when the task starts), params %s", t.Workflow.Name, params)
	}
	return ""
}

// effectiveOf returns t's effective retry policy and timeout.
func effectiveOf(t core.TaskDef) effectiveJSON {
	p := t.Policy()
	e := effectiveJSON{Task: t.Name, MaxAttempts: p.MaxAttempts, InitialBackoff: core.Duration(p.InitialBackoff),
		MaxBackoff: core.Duration(p.MaxBackoff), Jitter: "full", Timeout: t.Timeout, Defaulted: []string{},
		Kind: t.Kind(), TriggerRule: t.Rule(), When: t.When, ForEach: t.ForEach, OnFailure: t.OnFailure}
	if t.ForEach != "" {
		n := t.MaxItemsOrDefault()
		e.MaxItems = &n
	}
	if w := t.WaitFor; w != nil {
		timeout, onTimeout := core.Duration(w.WaitTimeout()), w.OnTimeout
		if onTimeout == "" {
			onTimeout = core.OnTimeoutFail
		}
		e.WaitTimeout, e.OnTimeout = &timeout, &onTimeout
	}
	r := t.Retry
	if r == nil {
		r = &core.RetrySpec{}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"max_attempts", r.MaxAttempts != nil}, {"initial_backoff", r.InitialBackoff != nil}, {"max_backoff", r.MaxBackoff != nil}, {"timeout", t.Timeout != nil}} {
		if !f.set {
			e.Defaulted = append(e.Defaulted, f.name)
		}
	}
	return e
}

// defaulted reports whether the file leaves field out.
func (e effectiveJSON) defaulted(field string) bool {
	for _, d := range e.Defaulted {
		if d == field {
			return true
		}
	}
	return false
}

// cell is value marked for the table: "(default)" when the file leaves
// field out and the value is the default, "(= initial_backoff)" or "(=
// max_backoff)" when it follows from the other bound the file sets.
func (e effectiveJSON) cell(field, value string) string {
	if !e.defaulted(field) {
		return value
	}
	switch {
	case field == "initial_backoff" && time.Duration(e.InitialBackoff) != core.InitialBackoffDefault:
		return value + " (= max_backoff)"
	case field == "max_backoff" && time.Duration(e.MaxBackoff) != core.MaxBackoffDefault:
		return value + " (= initial_backoff)"
	}
	return value + " (default)"
}

// timeoutText is the timeout for the table: "none" when there is none.
func (e effectiveJSON) timeoutText() string {
	if e.Timeout == nil {
		return "none"
	}
	return fmtDuration(time.Duration(*e.Timeout))
}

// workflowJSON is `workflow show -o json`: the stored workflow with its
// definition in the workflow file's shape, every field present (absent
// values null, fail_fast false), unlike the stored encoding, which omits
// them and must keep doing so (an unchanged file is recognised by equal
// jsonb); each task's effective retry policy and timeout beside it (not in
// it: the definition stays a file apply takes back); and the workflow's
// rollbacks, oldest first ([] when none).
type workflowJSON struct {
	Name       string                `json:"name"`
	Version    int                   `json:"version"`
	Definition definitionJSON        `json:"definition"`
	Effective  []effectiveJSON       `json:"effective"`
	CreatedAt  time.Time             `json:"created_at"`
	Events     []store.WorkflowEvent `json:"events"`
}

type definitionJSON struct {
	Name        string  `json:"name"`
	Description *string `json:"description"`
	FailFast    bool    `json:"fail_fast"`
	// Defaults is the file's defaults block, already merged into Tasks.
	Defaults *core.TaskDefaults `json:"defaults"`
	Tasks    []taskDefJSON      `json:"tasks"`
}

type taskDefJSON struct {
	Name           string          `json:"name"`
	Handler        string          `json:"handler"`
	Params         json.RawMessage `json:"params"`
	DependsOn      []string        `json:"depends_on"`
	Retry          *retrySpecJSON  `json:"retry"`
	Timeout        *core.Duration  `json:"timeout"`
	IdempotencyKey *string         `json:"idempotency_key"`
	IdempotencyTTL *core.Duration  `json:"idempotency_ttl"`
	When           *string         `json:"when"`
	TriggerRule    *string         `json:"trigger_rule"`
	OnFailure      bool            `json:"on_failure"`
	ForEach        *string         `json:"for_each"`
	MaxItems       *int            `json:"max_items"`
	Sleep          *sleepSpecJSON  `json:"sleep"`
	WaitFor        *waitSpecJSON   `json:"wait_for"`
	Workflow       *childSpecJSON  `json:"workflow"`
}

// sleepSpecJSON, waitSpecJSON and childSpecJSON are a task's sleep,
// wait_for and workflow blocks (core.SleepSpec, core.WaitSpec,
// core.ChildSpec) with every field present, null when the file leaves it
// out.
type sleepSpecJSON struct {
	For   *core.Duration `json:"for"`
	Until *string        `json:"until"`
}

type waitSpecJSON struct {
	Event     string         `json:"event"`
	Key       *string        `json:"key"`
	Timeout   *core.Duration `json:"timeout"`
	OnTimeout *string        `json:"on_timeout"`
}

type childSpecJSON struct {
	Name   string  `json:"name"`
	Params *string `json:"params"`
}

// heldSpecsJSON sets tj's sleep, wait_for and workflow blocks from t's.
func heldSpecsJSON(tj *taskDefJSON, t core.TaskDef) {
	if s := t.Sleep; s != nil {
		tj.Sleep = &sleepSpecJSON{For: s.For, Until: nonEmpty(s.Until)}
	}
	if w := t.WaitFor; w != nil {
		tj.WaitFor = &waitSpecJSON{Event: w.Event, Key: nonEmpty(w.Key), Timeout: w.Timeout, OnTimeout: nonEmpty(w.OnTimeout)}
	}
	if c := t.Workflow; c != nil {
		tj.Workflow = &childSpecJSON{Name: c.Name, Params: nonEmpty(c.Params)}
	}
}

type retrySpecJSON struct {
	MaxAttempts    *int           `json:"max_attempts"`
	InitialBackoff *core.Duration `json:"initial_backoff"`
	MaxBackoff     *core.Duration `json:"max_backoff"`
}

func newWorkflowJSON(wf store.Workflow, events []store.WorkflowEvent) workflowJSON {
	d := wf.Definition
	out := workflowJSON{Name: wf.Name, Version: wf.Version, CreatedAt: wf.CreatedAt, Events: events,
		Definition: definitionJSON{Name: d.Name, Description: nonEmpty(d.Description), FailFast: d.FailFast, Defaults: d.Defaults, Tasks: make([]taskDefJSON, 0, len(d.Tasks))},
		Effective:  make([]effectiveJSON, 0, len(d.Tasks))}
	if out.Events == nil {
		out.Events = []store.WorkflowEvent{}
	}
	for _, t := range d.Tasks {
		tj := taskDefJSON{Name: t.Name, Handler: t.Handler, Params: t.Params, DependsOn: t.DependsOn, Timeout: t.Timeout, IdempotencyKey: nonEmpty(t.IdempotencyKey),
			IdempotencyTTL: t.IdempotencyTTL, When: nonEmpty(t.When), TriggerRule: nonEmpty(t.TriggerRule), OnFailure: t.OnFailure,
			ForEach: nonEmpty(t.ForEach), MaxItems: t.MaxItems}
		if len(tj.Params) == 0 {
			tj.Params = json.RawMessage("null")
		}
		if tj.DependsOn == nil {
			tj.DependsOn = []string{}
		}
		if r := t.Retry; r != nil {
			tj.Retry = &retrySpecJSON{MaxAttempts: r.MaxAttempts, InitialBackoff: r.InitialBackoff, MaxBackoff: r.MaxBackoff}
		}
		heldSpecsJSON(&tj, t)
		out.Definition.Tasks = append(out.Definition.Tasks, tj)
		out.Effective = append(out.Effective, effectiveOf(t))
	}
	return out
}

// nonEmpty returns nil for "", else a pointer to s.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
