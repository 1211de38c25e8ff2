package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flowforge/flowforge/core/expr"
)

// Flow control of a task (issue 27): a concurrency key bounds how many task
// runs holding the same key are dispatched or running at once, across every
// worker; a rate limit bounds how many holding the same key start in any
// window of its period. Both are enforced in PostgreSQL by the scheduler's
// admission (store.Admit), never in a worker's memory.

// MaxConcurrencyLimit bounds concurrency.limit.
const MaxConcurrencyLimit = 100_000

// MaxRateLimit bounds rate_limit.limit: the admission keeps the start time
// of each of the last `limit` admissions of a key.
const MaxRateLimit = 10_000

// MinRatePer and MaxRatePer bound rate_limit.per.
const (
	MinRatePer = 100 * time.Millisecond
	MaxRatePer = 24 * time.Hour
)

// MaxFlowKeyLength bounds a concurrency or rate-limit key as evaluated, in
// bytes.
const MaxFlowKeyLength = 256

// ConcurrencySpec is a task's `concurrency: {key, limit}`: at most Limit
// task runs with the same key are READY-and-dispatched or RUNNING at once.
type ConcurrencySpec struct {
	// Key is a CEL expression over params giving a string or an integer
	// ("'customer-' + params.customer"), or a plain string (stripe-api):
	// see FlowKey.
	Key string `json:"key"`
	// Limit is 1 to MaxConcurrencyLimit.
	Limit int `json:"limit"`
}

// RateLimitSpec is a task's `rate_limit: {key, limit, per}`: at most Limit
// task runs with the same key start in any window of Per (database clock).
type RateLimitSpec struct {
	Key   string   `json:"key"` // as ConcurrencySpec.Key
	Limit int      `json:"limit"`
	Per   Duration `json:"per"` // MinRatePer to MaxRatePer
}

// Run-level concurrency strategies: what a run does when its key has no
// free slot.
const (
	// StrategyQueue: the run waits (no task of it starts) until a run of
	// its key ends. The default.
	StrategyQueue = "queue"
	// StrategyCancelNewest: the new run is cancelled, with a reason.
	StrategyCancelNewest = "cancel-newest"
	// StrategyCancelInProgress: the oldest running run of the key is
	// cancelled (its handlers' contexts cancelled) and the new run starts
	// once it has ended.
	StrategyCancelInProgress = "cancel-in-progress"
)

// RunConcurrencySpec is a workflow's `concurrency: {key, limit, strategy}`:
// at most Limit open runs with the same key have started.
type RunConcurrencySpec struct {
	Key      string `json:"key"` // as ConcurrencySpec.Key
	Limit    int    `json:"limit"`
	Strategy string `json:"strategy,omitempty"` // StrategyQueue ("") and the others
}

// StrategyOrDefault is the spec's strategy, StrategyQueue when unset.
func (c *RunConcurrencySpec) StrategyOrDefault() string {
	if c.Strategy == "" {
		return StrategyQueue
	}
	return c.Strategy
}

func (c *RunConcurrencySpec) validate() error {
	if c == nil {
		return nil
	}
	switch c.Strategy {
	case "", StrategyQueue, StrategyCancelNewest, StrategyCancelInProgress:
	default:
		return fmt.Errorf("strategy must be %s, %s or %s, got %q", StrategyQueue, StrategyCancelNewest, StrategyCancelInProgress, c.Strategy)
	}
	if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
		return fmt.Errorf("limit must be between 1 and %d, got %d%s", MaxConcurrencyLimit, c.Limit, limitRequired(c.Limit))
	}
	if _, err := CompileFlowKey(c.Key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	return nil
}

// ErrBadFlowKey is matched by the errors of a flow key that cannot be
// evaluated for a run's params (wrapped in ErrBadParams by RenderRunTasks).
var ErrBadFlowKey = errors.New("bad flow-control key")

// plainKeyRE is what a key that is not a CEL expression may be.
var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]*$`)

// FlowKey is a compiled concurrency or rate-limit key.
type FlowKey struct {
	plain string
	prg   *expr.Program
}

// CompileFlowKey compiles a key as written in a workflow file. A plain
// word of letters, digits and . _ : / @ - that is not an expression over
// params is the key itself (stripe-api, tenant, and 2026-12 or 10/2,
// which CEL would read as arithmetic); any other key that compiles as a
// CEL expression over params is one (its value, a string or an integer,
// is the key of each run). A key may
// not read upstream results: it is fixed when the run is triggered. Errors
// say why, with CEL's position when it was meant as an expression.
func CompileFlowKey(src string) (FlowKey, error) {
	if strings.TrimSpace(src) == "" {
		return FlowKey{}, errors.New("the key is empty")
	}
	prg, err := expr.Compile(src, expr.Key, nil)
	if err != nil {
		if plainKeyRE.MatchString(src) && !strings.HasPrefix(src, "params.") && !strings.HasPrefix(src, "upstream.") {
			return FlowKey{plain: src}, CheckFlowKey(src)
		}
		if strings.Contains(src, "upstream") {
			return FlowKey{}, fmt.Errorf("%s reads upstream: a key cannot read upstream results, whatever the task depends on (it is evaluated once, when the run is triggered); use params", src)
		}
		return FlowKey{}, fmt.Errorf("%v (a key is a CEL expression over params, or a plain word such as stripe-api)", err)
	}
	if prg.Constant() {
		if plainKeyRE.MatchString(src) {
			// A plain word that CEL also reads (2026-12, 10/2, 007) is
			// the word: nobody writes arithmetic on constants for a key.
			return FlowKey{plain: src}, CheckFlowKey(src)
		}
		v, err := prg.Key(context.Background(), expr.Input{Params: json.RawMessage(`{}`)})
		if err != nil {
			return FlowKey{}, err
		}
		return FlowKey{plain: v}, CheckFlowKey(v)
	}
	return FlowKey{prg: prg}, nil
}

// Eval gives the key for a run with params (a JSON object). Errors wrap
// ErrBadFlowKey and name the expression.
func (k FlowKey) Eval(ctx context.Context, params json.RawMessage) (string, error) {
	if k.prg == nil {
		return k.plain, nil
	}
	v, err := k.prg.Key(ctx, expr.Input{Params: params})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadFlowKey, err)
	}
	if err := CheckFlowKey(v); err != nil {
		return "", fmt.Errorf("%w: %s gives %q: %w", ErrBadFlowKey, k.prg.Source(), v, err)
	}
	return v, nil
}

// CheckFlowKey checks a concurrency or rate-limit key as evaluated (and
// the part after "<workflow>/" of a run key): not empty, valid UTF-8
// without NUL, at most MaxFlowKeyLength bytes. The error says which.
func CheckFlowKey(v string) error {
	switch {
	case v == "":
		return errors.New("the key is empty")
	case len(v) > MaxFlowKeyLength:
		return fmt.Errorf("the key is %d bytes, longer than the limit of %d", len(v), MaxFlowKeyLength)
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		return errors.New("the key holds invalid UTF-8 or a NUL character")
	}
	return nil
}

// Priorities of task runs (TaskDef.Priority, `run trigger --priority`):
// they order the waiters of a concurrency key or a rate limit, the higher
// first, each waiter gaining a level per store.PriorityAging it waits.
const (
	PriorityMin     = 1
	PriorityMax     = 4
	PriorityDefault = 2
)

// ValidatePriority checks a priority: PriorityMin to PriorityMax.
func ValidatePriority(p int) error {
	if p < PriorityMin || p > PriorityMax {
		return fmt.Errorf("priority must be between %d (lowest) and %d (highest), got %d", PriorityMin, PriorityMax, p)
	}
	return nil
}

// PriorityOrDefault is t's priority, PriorityDefault when unset.
func (t TaskDef) PriorityOrDefault() int {
	if t.Priority == nil {
		return PriorityDefault
	}
	return *t.Priority
}

// validateFlow checks t's concurrency, rate_limit and priority.
func (t TaskDef) validateFlow() error {
	if t.Priority != nil {
		if err := ValidatePriority(*t.Priority); err != nil {
			return err
		}
		if k := t.Kind(); k.Held() && k != KindForEach {
			return fmt.Errorf("a %s task runs no handler: priority applies to tasks that do", k)
		}
	}
	if t.Concurrency == nil && t.RateLimit == nil {
		return nil
	}
	if k := t.Kind(); k.Held() && k != KindForEach {
		return fmt.Errorf("a %s task runs no handler: concurrency and rate_limit apply to tasks that do", k)
	}
	if c := t.Concurrency; c != nil {
		if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
			return fmt.Errorf("concurrency.limit must be between 1 and %d, got %d%s", MaxConcurrencyLimit, c.Limit, limitRequired(c.Limit))
		}
		if _, err := CompileFlowKey(c.Key); err != nil {
			return fmt.Errorf("concurrency.key: %w", err)
		}
	}
	if r := t.RateLimit; r != nil {
		if r.Limit < 1 || r.Limit > MaxRateLimit {
			return fmt.Errorf("rate_limit.limit must be between 1 and %d, got %d%s", MaxRateLimit, r.Limit, limitRequired(r.Limit))
		}
		if per := time.Duration(r.Per); per < MinRatePer || per > MaxRatePer {
			return fmt.Errorf("rate_limit.per must be between %s and %s, got %s", MinRatePer, MaxRatePer, per)
		}
		if _, err := CompileFlowKey(r.Key); err != nil {
			return fmt.Errorf("rate_limit.key: %w", err)
		}
	}
	return nil
}

// Flow reports whether t has a concurrency key or a rate limit: its task
// runs wait for the scheduler's admission before they are dispatched.
func (t TaskDef) Flow() bool { return t.Concurrency != nil || t.RateLimit != nil }

// UsesFlowControl reports whether d has a run-level concurrency key or a
// task of d has a concurrency key or a rate limit.
func (d *Definition) UsesFlowControl() bool {
	if d.Concurrency != nil {
		return true
	}
	for _, t := range d.Tasks {
		if t.Flow() {
			return true
		}
	}
	return false
}

// FlowKeys are one run's evaluated keys, task by task in Definition.Tasks'
// order ("" where a task has none).
type FlowKeys struct {
	Concurrency, Rate []string
	// Run is the run's own key (the workflow's concurrency; "": none),
	// scoped to its workflow: "<workflow>/<evaluated key>", so that two
	// workflows whose keys evaluate alike never share slots or strategies.
	Run string
}

// FlowPrograms are the compiled keys of a definition's tasks, compiled once
// (NewFlowPrograms) and evaluated for each run (Eval); safe for concurrent
// use. A nil *FlowPrograms is a definition without flow control.
type FlowPrograms struct {
	names             []string
	concurrency, rate []*FlowKey
	run               *FlowKey
	workflow          string // the definition's name, which scopes run
}

// NewFlowPrograms compiles the keys of d's tasks; nil when no task of d has
// flow control. Errors (a key Validate would refuse) name the task.
func NewFlowPrograms(d *Definition) (*FlowPrograms, error) {
	if !d.UsesFlowControl() {
		return nil, nil
	}
	n := len(d.Tasks)
	f := &FlowPrograms{names: make([]string, n), concurrency: make([]*FlowKey, n), rate: make([]*FlowKey, n), workflow: d.Name}
	if d.Concurrency != nil {
		k, err := CompileFlowKey(d.Concurrency.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: concurrency.key: %w", ErrBadWorkflow, err)
		}
		f.run = &k
	}
	for i, t := range d.Tasks {
		f.names[i] = t.Name
		if t.Concurrency != nil {
			k, err := CompileFlowKey(t.Concurrency.Key)
			if err != nil {
				return nil, fmt.Errorf("%w: task %q: concurrency.key: %w", ErrBadWorkflow, t.Name, err)
			}
			f.concurrency[i] = &k
		}
		if t.RateLimit != nil {
			k, err := CompileFlowKey(t.RateLimit.Key)
			if err != nil {
				return nil, fmt.Errorf("%w: task %q: rate_limit.key: %w", ErrBadWorkflow, t.Name, err)
			}
			f.rate[i] = &k
		}
	}
	return f, nil
}

// Eval evaluates the keys for a run with params (a JSON object
// ValidateParams accepted); the zero FlowKeys for a nil f. Errors wrap
// ErrBadParams and name the task and the block.
func (f *FlowPrograms) Eval(ctx context.Context, params json.RawMessage) (FlowKeys, error) {
	if f == nil {
		return FlowKeys{}, nil
	}
	out := FlowKeys{Concurrency: make([]string, len(f.names)), Rate: make([]string, len(f.names))}
	if f.run != nil {
		v, err := f.run.Eval(ctx, params)
		if err != nil {
			return FlowKeys{}, fmt.Errorf("%w: concurrency.key: %w", ErrBadParams, err)
		}
		out.Run = f.workflow + "/" + v
	}
	for i, name := range f.names {
		for _, b := range []struct {
			what string
			k    *FlowKey
			out  *string
		}{{"concurrency", f.concurrency[i], &out.Concurrency[i]}, {"rate_limit", f.rate[i], &out.Rate[i]}} {
			if b.k == nil {
				continue
			}
			v, err := b.k.Eval(ctx, params)
			if err != nil {
				return FlowKeys{}, fmt.Errorf("%w: task %q: %s.key: %w", ErrBadParams, name, b.what, err)
			}
			*b.out = v
		}
	}
	return out, nil
}

// limitRequired adds to a limit's range error, for a limit of 0, that the
// limit is required: a mapping without one decodes as 0.
func limitRequired(n int) string {
	if n == 0 {
		return " (a limit is required)"
	}
	return ""
}

// flowLimitTypeError rewrites encoding/json's error for a flow-control
// limit that is not a whole number or overflows an int ("cannot unmarshal
// number 2.5 into Go struct field ConcurrencySpec.tasks.concurrency.limit
// of type int") as the range it must be in, naming the field. ok is false
// for any other error, which the caller reports as it is.
func flowLimitTypeError(err error) (msg string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || !strings.HasSuffix(te.Field, "concurrency.limit") && !strings.HasSuffix(te.Field, "rate_limit.limit") {
		return "", false
	}
	field, max := "concurrency.limit", MaxConcurrencyLimit
	if strings.HasSuffix(te.Field, "rate_limit.limit") {
		field, max = "rate_limit.limit", MaxRateLimit
	}
	return fmt.Sprintf("%s must be a whole number from 1 to %d, got %s", field, max, jsonGot(te.Value)), true
}
