package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"text/template"
	"text/template/parse"

	"github.com/flowforge/flowforge/core/expr"
)

// The workflow language of issue 26: defaults, when, trigger_rule,
// on_failure, for_each. What each field means is on TaskDef; this file
// checks them at apply and says how a task run of each kind is handled.

// MaxItemsDefault is a for_each task's max_items when it gives none.
const MaxItemsDefault = 10_000

// MaxItemsLimit bounds max_items: a task runs at most this many elements.
const MaxItemsLimit = 100_000

// TaskKind says who runs a task run. The scheduler dispatches on it: a
// "task" goes to a worker through the outbox; a "for_each" is expanded by
// the scheduler into task runs of kind "task", one per element, and ends
// with them (it holds no worker, no lease). Later kinds (a durable sleep,
// a wait for an event, a child run) are the scheduler's too.
type TaskKind string

// The task kinds.
const (
	KindTask    TaskKind = "task"
	KindForEach TaskKind = "for_each"
)

// Kind is the task's kind: for_each when it has ForEach, sleep, wait or
// workflow when it has that block, else task.
func (t TaskDef) Kind() TaskKind {
	switch {
	case t.ForEach != "":
		return KindForEach
	case t.Sleep != nil:
		return KindSleep
	case t.WaitFor != nil:
		return KindWait
	case t.Workflow != nil:
		return KindWorkflow
	}
	return KindTask
}

// HoldsTasks reports whether any task of d is a sleep, a wait or a child
// run (migration 00017's columns and tables).
func (d *Definition) HoldsTasks() bool {
	return slices.ContainsFunc(d.Tasks, func(t TaskDef) bool {
		k := t.Kind()
		return k.Held() && k != KindForEach
	})
}

// Rule is the task's trigger rule (all_success when it gives none).
func (t TaskDef) Rule() TriggerRule {
	if t.TriggerRule == "" {
		return RuleAllSuccess
	}
	return TriggerRule(t.TriggerRule)
}

// Plain reports whether the task is promoted as every task was before the
// language: a "task" run, all_success, without when or on_failure. Only a
// plain task may be promoted by a finish's counter join or be a root made
// READY at trigger; every other one is decided by the scheduler's pass.
func (t TaskDef) Plain() bool {
	return t.Kind() == KindTask && t.Rule() == RuleAllSuccess && t.When == "" && !t.OnFailure
}

// MaxItemsOrDefault is the task's max_items, MaxItemsDefault when it gives
// none.
func (t TaskDef) MaxItemsOrDefault() int {
	if t.MaxItems == nil {
		return MaxItemsDefault
	}
	return *t.MaxItems
}

// UsesLanguage reports whether any task of d is not Plain: a database
// holding such a version needs binaries that know the language (see
// store.ApplyWorkflowFile).
func (d *Definition) UsesLanguage() bool {
	return slices.ContainsFunc(d.Tasks, func(t TaskDef) bool { return !t.Plain() })
}

// TaskDefaults are the fields a workflow file's `defaults:` may give every
// task. A task's own field wins over the default as a whole (a task's
// retry block replaces the default's, it is not merged with it).
type TaskDefaults struct {
	Handler        string          `json:"handler,omitempty"`
	Params         json.RawMessage `json:"params,omitempty"`
	Retry          *RetrySpec      `json:"retry,omitempty"`
	Timeout        *Duration       `json:"timeout,omitempty"`
	IdempotencyTTL *Duration       `json:"idempotency_ttl,omitempty"`
}

// applyDefaults merges d.Defaults into every task that leaves the field
// out.
func (d *Definition) applyDefaults() {
	df := d.Defaults
	if df == nil {
		return
	}
	for i := range d.Tasks {
		t := &d.Tasks[i]
		if k := t.Kind(); k.Held() && k != KindForEach {
			// A sleep, a wait or a child run runs no handler: only a
			// wait's retry policy (its timeout is an attempt) applies.
			if k == KindWait && t.Retry == nil && df.Retry != nil {
				r := *df.Retry
				t.Retry = &r
			}
			continue
		}
		if t.Handler == "" {
			t.Handler = df.Handler
		}
		if len(t.Params) == 0 && len(df.Params) > 0 {
			t.Params = append([]byte(nil), df.Params...)
		}
		if t.Retry == nil && df.Retry != nil {
			r := *df.Retry
			t.Retry = &r
		}
		if t.Timeout == nil {
			t.Timeout = df.Timeout
		}
		if t.IdempotencyTTL == nil && t.IdempotencyKey != "" {
			t.IdempotencyTTL = df.IdempotencyTTL
		}
	}
}

// validateLanguage checks the language fields of t on their own.
func (t TaskDef) validateLanguage() error {
	if _, err := ParseTriggerRule(t.TriggerRule); err != nil {
		return err
	}
	switch {
	case t.TriggerRule != "" && len(t.DependsOn) == 0:
		return errors.New("trigger_rule needs depends_on: it says which outcomes of the upstream tasks let the task run")
	case t.OnFailure && len(t.DependsOn) > 0:
		return errors.New("an on_failure task takes no depends_on: it runs when any task of its run fails, after that task settled")
	case t.OnFailure && t.ForEach != "":
		return errors.New("an on_failure task cannot have for_each")
	case t.MaxItems != nil && t.ForEach == "":
		return errors.New("max_items needs for_each: it bounds the for_each list")
	case t.MaxItems != nil && (*t.MaxItems < 1 || *t.MaxItems > MaxItemsLimit):
		return fmt.Errorf("max_items must be between 1 and %d, got %d", MaxItemsLimit, *t.MaxItems)
	}
	return nil
}

// checkLanguage checks, once the graph is known to be a DAG (deps), what
// needs it: no task depends on an on_failure task, and each expression
// compiles over the upstream tasks its task may read (its ancestors).
func (d *Definition) checkLanguage(deps map[string][]string) error {
	onFailure := map[string]bool{}
	for _, t := range d.Tasks {
		onFailure[t.Name] = t.OnFailure
	}
	for _, t := range d.Tasks {
		for _, dep := range t.DependsOn {
			if onFailure[dep] {
				return fmt.Errorf("%w: task %q: depends on on_failure task %q, which runs only when its run fails", ErrBadWorkflow, t.Name, dep)
			}
		}
		up := Ancestors(deps, t.Name)
		if err := t.checkHeldExpressions(up); err != nil {
			return fmt.Errorf("%w: task %q: %v", ErrBadWorkflow, t.Name, err)
		}
		if t.When != "" {
			if _, err := expr.Compile(t.When, expr.Bool, up); err != nil {
				return fmt.Errorf("%w: task %q: when: %v", ErrBadWorkflow, t.Name, err)
			}
		}
		if t.ForEach != "" {
			if _, err := expr.Compile(t.ForEach, expr.List, up); err != nil {
				return fmt.Errorf("%w: task %q: for_each: %v", ErrBadWorkflow, t.Name, err)
			}
		}
	}
	return nil
}

// checkItemUse refuses a template (at path, for the error) of a task
// without for_each that reads .Item, which only a for_each task's runs
// have.
func (t TaskDef) checkItemUse(path string, tmpl *template.Template) error {
	if t.ForEach != "" || tmpl.Tree == nil || !readsItem(tmpl.Tree.Root) {
		return nil
	}
	return fmt.Errorf("%s: .Item is the element of a for_each task: this task has no for_each", path)
}

// readsItem reports whether the template tree under n reads the field
// .Item.
func readsItem(n parse.Node) bool {
	found := false
	walkFields(n, func(ident []string) {
		found = found || ident[0] == "Item"
	})
	return found
}

// walkFields calls f with the identifiers of every field the template
// tree under n reads (`.Item.file` is ["Item", "file"]), never empty.
func walkFields(n parse.Node, f func(ident []string)) {
	switch v := n.(type) {
	case *parse.ListNode:
		if v == nil {
			return
		}
		for _, c := range v.Nodes {
			walkFields(c, f)
		}
	case *parse.ActionNode:
		walkFields(v.Pipe, f)
	case *parse.PipeNode:
		if v == nil {
			return
		}
		for _, c := range v.Cmds {
			for _, a := range c.Args {
				walkFields(a, f)
			}
		}
	case *parse.FieldNode:
		if len(v.Ident) > 0 {
			f(v.Ident)
		}
	case *parse.ChainNode:
		walkFields(v.Node, f)
	case *parse.IfNode:
		walkFields(v.Pipe, f)
		walkFields(v.List, f)
		walkFields(v.ElseList, f)
	case *parse.RangeNode:
		walkFields(v.Pipe, f)
		walkFields(v.List, f)
		walkFields(v.ElseList, f)
	case *parse.WithNode:
		walkFields(v.Pipe, f)
		walkFields(v.List, f)
		walkFields(v.ElseList, f)
	case *parse.TemplateNode:
		walkFields(v.Pipe, f)
	}
}

// failingPart names the part of doc (a decoded workflow file) that does
// not decode: `defaults: ` when its defaults do not decode as
// TaskDefaults, else what failingTask says.
func failingPart(doc any) string {
	m, _ := doc.(map[string]any)
	if d, ok := m["defaults"]; ok && decodeStrict(d, &TaskDefaults{}) != nil {
		return "defaults: "
	}
	return failingTask(doc)
}
