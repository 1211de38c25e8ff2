package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// qTrigger's parameters (see its comment in trigger.go): the definition's
// tasks column by column (taskDefs), what each run renders from its params
// (runKeys), and the array of them all (triggerArgs).

// triggerArgs are qTrigger's parameters for runs of wf (pinned: the caller
// asked for this version). Errors wrap core.ErrBadParams (see
// runKeys.add); with several runs as a *BadRunError naming the run.
func triggerArgs(wf Workflow, pinned bool, runs []newRun, keys []sql.NullString) ([]any, error) {
	def := &wf.Definition
	ids := make([]string, len(runs))
	params := make([]string, len(runs))
	priorities := make([]int64, len(runs))
	traceparents := make([]string, len(runs))
	flow, err := wf.flowPrograms()
	if err != nil {
		return nil, err
	}
	var rk runKeys
	for i, r := range runs {
		ids[i] = r.id.String()
		params[i] = string(r.params)
		priorities[i] = int64(r.priority)
		traceparents[i] = r.traceparent
		if err := rk.add(def, flow, r.params); err != nil {
			if len(runs) > 1 {
				return nil, &BadRunError{Index: i, Err: err}
			}
			return nil, err
		}
	}
	ikeys := make([]*string, len(runs))
	for i, k := range keys {
		if k.Valid {
			ikeys[i] = &k.String
		}
	}
	t := newTaskDefs(def)
	runLimit, runStrategy := 0, ""
	if c := def.Concurrency; c != nil {
		runLimit, runStrategy = c.Limit, c.StrategyOrDefault()
	}
	var wake any // $28: no wake-up of the schedulers
	wakes := []string{}
	switch {
	case t.decidedRoots:
		wake, wakes = TasksChannel, RunWake{Runs: runIDs(runs), Admit: t.flowRoots}.Encode()
	case t.flowRoots:
		// Roots waiting for their admission need no pass over their runs:
		// an admission round (AdmitWake).
		wake, wakes = TasksChannel, RunWake{Admit: true}.Encode()
	}
	return []any{
		ids, wf.ID, wf.Name, wf.Version, params, ikeys, def.FailFast, pinned,
		t.names, t.handlers, t.params, t.deps, t.maxAttempts, t.initial, t.maxBackoff, t.timeouts, t.ttls,
		rk.keys, len(def.Tasks),
		OutboxChannel, "", rk.params,
		t.kinds, t.rules, t.onFailure, t.whens, t.ready, wake, wakes,
		t.concLimits, t.rateLimits, t.ratePers, rk.concKeys, rk.rateKeys,
		rk.runKeys, runLimit, runStrategy,
		priorities, t.priorities, traceparents,
	}, nil
}

// runIDs returns the ids of runs.
func runIDs(runs []newRun) []uuid.UUID {
	ids := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	return ids
}

// taskDefs are a definition's tasks, column by column, as qTrigger takes
// them ($9..$17): what every run of it copies into its task runs.
type taskDefs struct {
	names       []string
	handlers    []string
	params      []string // JSON objects
	deps        []string // JSON arrays of task names
	maxAttempts []int64
	initial     []int64 // initial backoff, ms
	maxBackoff  []int64 // ms
	timeouts    []int64 // ms; 0: none
	ttls        []int64 // ms; 0: a recorded result is reused for ever
	// The language's columns ($23..$27): what the statements that promote
	// a task read of it.
	kinds, rules, whens []string
	onFailure, ready    []bool
	// Flow control's limits ($30..$32; 0: none): concurrency.limit,
	// rate_limit.limit and rate_limit.per in ms.
	concLimits, rateLimits []int64
	ratePers               []int64
	// priorities ($39) are the tasks' priorities (core.TaskDef.PriorityOrDefault).
	priorities []int64
	// decidedRoots: a task that is not made READY has no upstream, so
	// only the scheduler's pass will start it (the trigger wakes them).
	decidedRoots bool
	// flowRoots: a root is made READY waiting for its admission, which
	// the schedulers' next round gives (the trigger wakes them).
	flowRoots bool
}

func newTaskDefs(def *core.Definition) taskDefs {
	n := len(def.Tasks)
	t := taskDefs{
		names: make([]string, n), handlers: make([]string, n), params: make([]string, n), deps: make([]string, n),
		maxAttempts: make([]int64, n), initial: make([]int64, n), maxBackoff: make([]int64, n),
		timeouts: make([]int64, n), ttls: make([]int64, n),
		kinds: make([]string, n), rules: make([]string, n), whens: make([]string, n),
		onFailure: make([]bool, n), ready: make([]bool, n),
		concLimits: make([]int64, n), rateLimits: make([]int64, n), ratePers: make([]int64, n), priorities: make([]int64, n),
	}
	for i, task := range def.Tasks {
		t.names[i], t.handlers[i], t.params[i] = task.Name, task.Handler, "{}"
		if len(task.Params) > 0 && string(task.Params) != "null" {
			t.params[i] = string(task.Params)
		}
		d := task.DependsOn
		if d == nil {
			d = []string{}
		}
		db, _ := json.Marshal(d)
		t.deps[i] = string(db)
		p := task.Policy()
		t.maxAttempts[i] = int64(p.MaxAttempts)
		t.initial[i] = p.InitialBackoff.Milliseconds()
		t.maxBackoff[i] = p.MaxBackoff.Milliseconds()
		t.timeouts[i] = task.TimeoutOrZero().Milliseconds()
		t.ttls[i] = task.IdempotencyTTLOrZero().Milliseconds()
		t.kinds[i], t.rules[i], t.whens[i] = string(task.Kind()), string(task.Rule()), task.When
		t.onFailure[i] = task.OnFailure
		// A plain root with flow control is made READY waiting for its
		// admission (flow_wait, no outbox row; the schedulers are woken: their
		// admission round after the turn admits it). Every root of a run with
		// its own concurrency key is left PENDING like a decided one: the
		// run waits for its slot.
		root := len(task.DependsOn) == 0
		t.ready[i] = root && task.Plain() && def.Concurrency == nil
		t.decidedRoots = t.decidedRoots || (root && !t.ready[i])
		t.flowRoots = t.flowRoots || (t.ready[i] && task.Flow())
		t.priorities[i] = int64(task.PriorityOrDefault())
		if c := task.Concurrency; c != nil {
			t.concLimits[i] = int64(c.Limit)
		}
		if r := task.RateLimit; r != nil {
			t.rateLimits[i], t.ratePers[i] = int64(r.Limit), time.Duration(r.Per).Milliseconds()
		}
	}
	return t
}

// runKeys are what new runs' task runs render from their params, run by
// run and task by task: the task idempotency keys ($18; empty while no task
// of the definition has a key template) and the rendered task params ($22;
// nil: the definition's; empty while no task's params hold a template).
type runKeys struct {
	keys   []string  // "": none
	params []*string // JSON objects
	// concKeys and rateKeys ($33, $34) are the tasks' evaluated
	// flow-control keys ("": none); empty while no task has one.
	concKeys, rateKeys []string
	// runKeys ($35) are the runs' own concurrency keys ("": none); empty
	// while the workflow has none.
	runKeys []string
}

// add appends what the task runs of a run of def with the checked params
// render (core.RenderRunTasks), and its flow-control keys (flow, nil:
// none; core.FlowPrograms.Eval). Errors wrap core.ErrBadParams: a template
// that cannot be rendered (a missing param), a key that cannot be stored,
// rendered params that cannot.
func (rk *runKeys) add(def *core.Definition, flow *core.FlowPrograms, params json.RawMessage) error {
	rt, err := core.RenderRunTasks(def, params)
	if err != nil {
		return err
	}
	fk, err := flow.Eval(context.Background(), params)
	if err != nil {
		return err
	}
	rk.concKeys = append(rk.concKeys, fk.Concurrency...)
	rk.rateKeys = append(rk.rateKeys, fk.Rate...)
	if def.Concurrency != nil {
		rk.runKeys = append(rk.runKeys, fk.Run)
	}
	rk.keys = append(rk.keys, rt.Keys...)
	for _, p := range rt.Params {
		var ps *string
		if p != nil {
			s := string(p)
			ps = &s
		}
		rk.params = append(rk.params, ps)
	}
	return nil
}
