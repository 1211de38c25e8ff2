package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flowforge/flowforge/core/expr"
)

// The tasks the scheduler holds without a worker (issue 26, part 2): a
// durable sleep, a wait for an event, a child run. Each is RUNNING while
// it holds, with no lease and no worker slot; the database says when it
// is due (task_runs.due_at, on the database clock) and what it waits for.

// The held task kinds.
const (
	// KindSleep: RUNNING until its due time, then SUCCEEDED.
	KindSleep TaskKind = "sleep"
	// KindWait: RUNNING until a matching event (SUCCEEDED with its
	// payload) or its timeout.
	KindWait TaskKind = "wait"
	// KindWorkflow: RUNNING while its child run runs; it takes the child's
	// final state.
	KindWorkflow TaskKind = "workflow"
)

// Held reports whether a task run of kind k is run by the scheduler
// without a worker: a for_each, a sleep, a wait or a child run. No such
// run is ever READY, dispatched or leased.
func (k TaskKind) Held() bool {
	return k != KindTask && k != ""
}

// SleepSpec is a task's `sleep:` block: exactly one of For and Until.
type SleepSpec struct {
	// For is how long to sleep from the moment the task starts (database
	// clock); positive, at most MaxSleep.
	For *Duration `json:"for,omitempty"`
	// Until is a CEL expression over params and upstream results giving a
	// timestamp (or an RFC 3339 string): the task sleeps until then; a
	// time already past ends it at once.
	Until string `json:"until,omitempty"`
}

// UnmarshalJSON decodes a `sleep:` mapping. Anything else — the common
// `sleep: 8s` — is refused with the forms it takes, rather than with
// encoding/json's "cannot unmarshal string into Go struct field".
func (s *SleepSpec) UnmarshalJSON(data []byte) error {
	if err := mappingOnly(data, `{for: DURATION} (e.g. sleep: {for: 8s}) or {until: EXPRESSION}`); err != nil {
		return err
	}
	type plain SleepSpec
	return json.Unmarshal(data, (*plain)(s))
}

// UnmarshalJSON decodes a `wait_for:` mapping; anything else (`wait_for:
// order-approved`) is refused with the form it takes.
func (w *WaitSpec) UnmarshalJSON(data []byte) error {
	if err := mappingOnly(data, `{event: NAME, key: EXPRESSION, timeout: DURATION, on_timeout: fail|skip} (e.g. wait_for: {event: order-approved})`); err != nil {
		return err
	}
	type plain WaitSpec
	return json.Unmarshal(data, (*plain)(w))
}

// mappingOnly returns an error naming want when data (a JSON value) is
// not an object (nor null): "takes a mapping WANT, not the string "8s"".
func mappingOnly(data []byte, want string) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	var got string
	switch v := v.(type) {
	case map[string]any, nil:
		return nil
	case string:
		got = fmt.Sprintf("the string %q", v)
	case []any:
		got = "a list"
	case bool:
		got = fmt.Sprintf("%t", v)
	default:
		got = fmt.Sprintf("the number %v", v)
	}
	return fmt.Errorf("takes a mapping %s, not %s", want, got)
}

// WaitSpec is a task's `wait_for:` block.
type WaitSpec struct {
	// Event is the event's name, as `ffctl event send NAME` gives it;
	// 1 to MaxNameLength characters.
	Event string `json:"event"`
	// Key is a CEL expression over params and upstream results giving the
	// key the event must carry (a string, or an integer in decimal); ""
	// matches an event sent without a key.
	Key string `json:"key,omitempty"`
	// Timeout bounds the wait (positive, at most MaxWait): when it
	// passes, the attempt fails (the task's retry policy applies: with
	// attempts left it waits again after its backoff) unless OnTimeout is
	// "skip". Nil means MaxWait.
	Timeout *Duration `json:"timeout,omitempty"`
	// OnTimeout is "fail" (the default) or "skip": the task is SKIPPED
	// when the timeout passes.
	OnTimeout string `json:"on_timeout,omitempty"`
}

// ChildSpec is a task's `workflow:` block: a child run.
type ChildSpec struct {
	// Name is the child's workflow (its newest version when the task
	// starts).
	Name string `json:"name"`
	// Params is a CEL expression over params and upstream results giving
	// the child's params, a map; "" means {}.
	Params string `json:"params,omitempty"`
}

// MaxSleep bounds a sleep's `for` and MaxWait a wait's timeout: a year.
const (
	MaxSleep = 366 * 24 * time.Hour
	MaxWait  = 366 * 24 * time.Hour
)

// The values of WaitSpec.OnTimeout.
const (
	OnTimeoutFail = "fail"
	OnTimeoutSkip = "skip"
)

// heldKind is the held kind t's blocks give ("" for none) and an error
// when it gives more than one, or one with for_each.
func (t TaskDef) heldKind() (TaskKind, error) {
	var kinds []TaskKind
	if t.Sleep != nil {
		kinds = append(kinds, KindSleep)
	}
	if t.WaitFor != nil {
		kinds = append(kinds, KindWait)
	}
	if t.Workflow != nil {
		kinds = append(kinds, KindWorkflow)
	}
	if t.ForEach != "" && len(kinds) > 0 {
		kinds = append(kinds, KindForEach)
	}
	if len(kinds) > 1 {
		return "", fmt.Errorf("a task is one of sleep, wait_for, workflow and for_each, not several (this one has %v)", kinds)
	}
	if len(kinds) == 0 {
		return "", nil
	}
	return kinds[0], nil
}

// WaitTimeout is the wait's timeout (MaxWait when it gives none).
func (w WaitSpec) WaitTimeout() time.Duration {
	if w.Timeout == nil {
		return MaxWait
	}
	return time.Duration(*w.Timeout)
}

// validateHeld checks the blocks of a held task on their own: their
// fields, and that it has no handler or params (the scheduler runs it,
// no handler does). A handler merged from `defaults:` is dropped at parse
// (applyDefaults), so only one the task writes itself is refused.
func (t TaskDef) validateHeld() error {
	k, err := t.heldKind()
	if err != nil || k == "" {
		return err
	}
	switch {
	case t.Handler != "":
		return fmt.Errorf("a %s task takes no handler: the scheduler runs it without a worker", k)
	case len(t.Params) > 0 && string(t.Params) != "null":
		return fmt.Errorf("a %s task takes no params (its expressions read the run's params)", k)
	case t.IdempotencyKey != "":
		return fmt.Errorf("a %s task takes no idempotency_key: no handler runs", k)
	case t.OnFailure:
		return fmt.Errorf("an on_failure task cannot be a %s task", k)
	case t.Timeout != nil && k == KindWait:
		return errors.New("a wait task takes no timeout: give it in wait_for (wait_for.timeout)")
	case t.Timeout != nil:
		return fmt.Errorf("a %s task takes no timeout: no handler runs (a sleep lasts its for or until; a child run as long as its tasks)", k)
	case t.Retry != nil && k != KindWait:
		return fmt.Errorf("a %s task takes no retry: it has no attempt to fail (requeue a DEAD one)", k)
	}
	switch k {
	case KindSleep:
		s := t.Sleep
		switch {
		case (s.For == nil) == (s.Until == ""):
			return errors.New("sleep takes exactly one of for (a duration) and until (a CEL timestamp)")
		case s.For != nil && (*s.For <= 0 || time.Duration(*s.For) > MaxSleep):
			return fmt.Errorf("sleep.for must be positive and at most %s, got %s", MaxSleep, time.Duration(*s.For))
		}
	case KindWait:
		w := t.WaitFor
		if err := ValidateEventName(w.Event); err != nil {
			return fmt.Errorf("wait_for.event: %w", err)
		}
		if w.Timeout != nil && (*w.Timeout <= 0 || time.Duration(*w.Timeout) > MaxWait) {
			return fmt.Errorf("wait_for.timeout must be positive and at most %s, got %s", MaxWait, time.Duration(*w.Timeout))
		}
		if w.OnTimeout != "" && w.OnTimeout != OnTimeoutFail && w.OnTimeout != OnTimeoutSkip {
			return fmt.Errorf("wait_for.on_timeout must be %q or %q, got %q", OnTimeoutFail, OnTimeoutSkip, w.OnTimeout)
		}
	case KindWorkflow:
		if err := ValidateName("workflow", t.Workflow.Name); err != nil {
			return fmt.Errorf("workflow.name: %w", err)
		}
	}
	return nil
}

// checkHeldExpressions compiles the expressions of t's held block over
// the upstream tasks it may read (up).
func (t TaskDef) checkHeldExpressions(up []string) error {
	check := func(field, src string, want expr.Want) error {
		if src == "" {
			return nil
		}
		prg, err := expr.Compile(src, want, up)
		if err != nil {
			return fmt.Errorf("%s: %v", field, err)
		}
		if !prg.Constant() {
			return nil
		}
		// The same value in every run: evaluate it now, so that a bad
		// constant is refused here rather than failing every run's task.
		if err := checkConstant(prg, want); err != nil {
			return fmt.Errorf("%s: %v", field, err)
		}
		return nil
	}
	switch {
	case t.Sleep != nil:
		return check("sleep.until", t.Sleep.Until, expr.Time)
	case t.WaitFor != nil:
		return check("wait_for.key", t.WaitFor.Key, expr.Key)
	case t.Workflow != nil:
		return check("workflow.params", t.Workflow.Params, expr.Object)
	}
	return nil
}

// MaxEventKeyLength bounds an event's key, in bytes.
const MaxEventKeyLength = 512

// ErrBadEvent is matched (errors.Is) by every error of ValidateEventName
// and ValidateEventKey.
var ErrBadEvent = errors.New("invalid event")

// ValidateEventName checks an event's name: 1 to MaxNameLength
// characters matching [a-z0-9][a-z0-9._-]* (order.approved), as a
// workflow's name. Errors wrap ErrBadEvent and say what is wrong.
func ValidateEventName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the event name is missing", ErrBadEvent)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w: event name %q is longer than %d characters", ErrBadEvent, name, MaxNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("%w: event name %q must match [a-z0-9][a-z0-9._-]*", ErrBadEvent, name)
	}
	return nil
}

// ValidateEventKey checks an event's key: at most MaxEventKeyLength bytes
// of UTF-8 without NUL ("" is the key of an event sent without one).
func ValidateEventKey(key string) error {
	switch {
	case len(key) > MaxEventKeyLength:
		return fmt.Errorf("%w: the key is %d bytes, longer than the limit of %d", ErrBadEvent, len(key), MaxEventKeyLength)
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return fmt.Errorf("%w: the key must be UTF-8 without NUL", ErrBadEvent)
	}
	return nil
}

// checkConstant evaluates the constant expression prg as want and returns
// the error its task would fail with in every run.
func checkConstant(prg *expr.Program, want expr.Want) error {
	ctx, in := context.Background(), expr.Input{}
	var err error
	switch want {
	case expr.Time:
		_, err = prg.Time(ctx, in)
	case expr.Key:
		var key string
		if key, err = prg.Key(ctx, in); err == nil {
			err = ValidateEventKey(key)
		}
	case expr.Object:
		_, err = prg.Object(ctx, in)
	}
	return err
}
