package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// t0 is the database clock of every fixture.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *time.Time         { t := t0.Add(-d); return &t }
func str(s string) *string                   { return &s }
func state(s core.TaskState) *core.TaskState { return &s }
func f64(f float64) *float64                 { return &f }
func id(n int) uuid.UUID {
	return uuid.MustParse(fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(n*0x2f1e3d5b), n))
}

// fakeSource serves fixed data; err, when set, fails every read.
type fakeSource struct {
	mu       sync.Mutex
	err      error
	runs     []store.Run
	run      store.Run
	task     store.TaskDetail
	taskLogs []store.TaskLogLine
	leases   []store.TaskRun
	outbox   OutboxData
	dead     []store.TaskRun
	workers  []store.Worker
	limits   []store.FlowLimit
	filters  []RunFilter
	requeued []uuid.UUID
	reasons  []string
	cancels  []uuid.UUID
	flows    []store.WorkflowSummary
	triggers []string       // "workflow params"
	pauses   []string       // "pause|resume workflow reason"
	sched    *fakeSchedules // the Schedules screen's world (schedules_test.go), made on first use
	others   []store.Run    // runs Run serves besides run (a child run: held_test.go)
}

func (f *fakeSource) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeSource) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeSource) Runs(_ context.Context, flt RunFilter) (RunsData, error) {
	if err := f.fail(); err != nil {
		return RunsData{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, flt)
	counts := map[core.RunState]int64{core.RunPending: 1, core.RunRunning: 2, core.RunSucceeded: RunCountCap, core.RunFailed: 1, core.RunCancelled: 0}
	var out []store.Run
	for _, r := range f.runs {
		if (flt.Workflow == "" || r.Workflow == flt.Workflow) && (flt.State == "" || r.State == flt.State) {
			out = append(out, r)
		}
	}
	return RunsData{Now: t0, Counts: counts, CountCap: RunCountCap, Runs: out}, nil
}

func (f *fakeSource) Run(_ context.Context, rid uuid.UUID) (RunData, error) {
	if err := f.fail(); err != nil {
		return RunData{}, err
	}
	for _, r := range append([]store.Run{f.run}, f.others...) {
		if r.ID == rid {
			return RunData{Now: t0, Run: r}, nil
		}
	}
	return RunData{}, store.ErrNotFound
}

func (f *fakeSource) Task(_ context.Context, tid uuid.UUID) (TaskData, error) {
	if err := f.fail(); err != nil {
		return TaskData{}, err
	}
	d := f.task
	d.ID = tid
	return TaskData{Now: t0, Task: d, Logs: f.taskLogs}, nil
}

func (f *fakeSource) Leases(context.Context) (LeasesData, error) {
	if err := f.fail(); err != nil {
		return LeasesData{}, err
	}
	return LeasesData{Now: t0, Leases: f.leases}, nil
}

func (f *fakeSource) Outbox(context.Context) (OutboxData, error) {
	if err := f.fail(); err != nil {
		return OutboxData{}, err
	}
	d := f.outbox
	d.Now = t0
	return d, nil
}

func (f *fakeSource) Dead(context.Context) (DeadData, error) {
	if err := f.fail(); err != nil {
		return DeadData{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return DeadData{Now: t0, Tasks: append([]store.TaskRun(nil), f.dead...)}, nil
}

func (f *fakeSource) Workers(context.Context) (WorkersData, error) {
	if err := f.fail(); err != nil {
		return WorkersData{}, err
	}
	return WorkersData{Now: t0, Workers: f.workers}, nil
}

func (f *fakeSource) Limits(context.Context) (LimitsData, error) {
	if err := f.fail(); err != nil {
		return LimitsData{}, err
	}
	return LimitsData{Now: t0, Limits: f.limits}, nil
}

func (f *fakeSource) Requeue(_ context.Context, ids []uuid.UUID, reason string) ([]store.RequeueResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.RequeueResult
	for _, i := range ids {
		f.requeued = append(f.requeued, i)
		f.reasons = append(f.reasons, reason)
		r := store.RequeueResult{ID: i, Outcome: store.RequeueNotDead, State: core.TaskPending}
		for j, d := range f.dead {
			if d.ID == i {
				f.dead = append(f.dead[:j], f.dead[j+1:]...)
				r.Outcome, r.State = store.RequeueMoved, core.TaskDead
				break
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeSource) CancelRun(_ context.Context, rid uuid.UUID, reason string) (store.CancelResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, rid)
	if rid != f.run.ID {
		return store.CancelResult{}, errors.New("no such run")
	}
	return store.CancelResult{TasksCancelled: 2}, nil
}

func deps(names ...string) store.JSON {
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(names)
	return b
}

// Find matches ref against the fake's run and task ids by prefix.
func (f *fakeSource) Find(_ context.Context, ref string) (store.IDMatch, error) {
	if err := f.fail(); err != nil {
		return store.IDMatch{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var found []store.IDMatch
	add := func(kind string, id uuid.UUID) {
		if strings.HasPrefix(id.String(), ref) {
			found = append(found, store.IDMatch{Kind: kind, ID: id})
		}
	}
	for _, r := range f.runs {
		add("run", r.ID)
	}
	for _, t := range f.run.Tasks {
		add("task", t.ID)
	}
	switch len(found) {
	case 0:
		return store.IDMatch{}, fmt.Errorf("no run or task id starts with %s: %w", ref, store.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return store.IDMatch{}, fmt.Errorf("%s matches %d ids: %w", ref, len(found), store.ErrAmbiguous)
}

func (f *fakeSource) Workflows(context.Context) (WorkflowsData, error) {
	if err := f.fail(); err != nil {
		return WorkflowsData{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return WorkflowsData{Now: t0, Workflows: f.flows}, nil
}

// Trigger records the trigger and returns the first fixture run's id.
func (f *fakeSource) Trigger(_ context.Context, workflow string, params json.RawMessage) (uuid.UUID, error) {
	if err := f.fail(); err != nil {
		return uuid.Nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.triggers = append(f.triggers, workflow+" "+string(params))
	return f.runs[0].ID, nil
}

// PauseWorkflow records the pause and marks the workflow (and the fixture
// run, when it is of it) paused since t0 - 5m by alice.
func (f *fakeSource) PauseWorkflow(_ context.Context, workflow, reason string) (store.PauseResult, error) {
	if err := f.fail(); err != nil {
		return store.PauseResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, "pause "+workflow+" "+reason)
	p := &store.Pause{Workflow: workflow, Mode: core.PauseQueue, Actor: "cli:alice@host1", Reason: reason, Since: t0.Add(-5 * time.Minute), UpdatedAt: t0.Add(-5 * time.Minute)}
	f.setPause(workflow, p)
	return store.PauseResult{Pause: *p, Changed: true}, nil
}

// ResumeWorkflow records the resume and clears the pause.
func (f *fakeSource) ResumeWorkflow(_ context.Context, workflow, reason string) (store.ResumeResult, error) {
	if err := f.fail(); err != nil {
		return store.ResumeResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, "resume "+workflow+" "+reason)
	f.setPause(workflow, nil)
	return store.ResumeResult{Resumed: true, Redispatched: 2}, nil
}

// setPause sets the pause of workflow's fixtures; f.mu is held.
func (f *fakeSource) setPause(workflow string, p *store.Pause) {
	for i := range f.flows {
		if f.flows[i].Name == workflow {
			f.flows[i].Paused = p
		}
	}
	if f.run.Workflow == workflow {
		f.run.Paused = p
	}
}

// newFake returns a source with a small, realistic, deterministic world,
// including hostile text (escape sequences) where operators would see it.
func newFake() *fakeSource {
	f := &fakeSource{}
	yes, no := true, false
	wfs := []string{"nightly-report", "wordcount", "billing-sync", "nightly-report", "wordcount", "image-resize"}
	states := []core.RunState{core.RunRunning, core.RunSucceeded, core.RunFailed, core.RunSucceeded, core.RunPending, core.RunRunning}
	for i := range wfs {
		started := ago(time.Duration(i+1)*time.Minute + 3*time.Second)
		r := store.Run{ID: id(i + 1), Workflow: wfs[i], WorkflowVersion: 1, State: states[i], CreatedAt: *ago(time.Duration(i+1)*time.Minute + 5*time.Second), TasksTotal: 4}
		switch states[i] {
		case core.RunSucceeded:
			r.TasksDone, r.StartedAt, r.FinishedAt = 4, started, ago(time.Duration(i+1)*time.Minute-40*time.Second)
		case core.RunFailed:
			r.TasksDone, r.StartedAt, r.FinishedAt = 3, started, ago(time.Duration(i+1)*time.Minute-10*time.Second)
		case "RUNNING":
			r.TasksDone, r.StartedAt = 1, started
		}
		f.runs = append(f.runs, r)
	}
	run := f.runs[0]
	run.Params = store.JSON(`{"date":"2026-11-30","region":"eu\u001b[2J"}`)
	worker := "worker-host1-4242-a1b2"
	run.Tasks = []store.TaskRun{
		{ID: id(101), RunID: run.ID, Name: "notify", State: "PENDING", MaxAttempts: 3, DependsOn: deps("load", "report")},
		{ID: id(102), RunID: run.ID, Name: "extract", State: "SUCCEEDED", Attempt: 1, MaxAttempts: 3, DependsOn: deps()},
		{ID: id(103), RunID: run.ID, Name: "load", State: "RUNNING", Attempt: 2, MaxAttempts: 3, DependsOn: deps("transform"), WorkerID: &worker, LeaseSeconds: f64(21.4), Error: str("connection reset by peer\ngoroutine 1 [running]")},
		{ID: id(104), RunID: run.ID, Name: "transform", State: "SUCCEEDED", Attempt: 1, MaxAttempts: 3, DependsOn: deps("extract")},
		{ID: id(105), RunID: run.ID, Name: "report", State: "RETRYING", Attempt: 1, MaxAttempts: 3, DependsOn: deps("transform"), Error: str("HTTP 503 from \x1b]0;pwned\x07reports.internal")},
		{ID: id(106), RunID: run.ID, Name: "mail", Handler: "sendmail", State: "READY", MaxAttempts: 3, FencingToken: 1, DependsOn: deps("extract"), WaitingForHandler: str("sendmail")},
	}
	f.run = run
	f.task = store.TaskDetail{
		TaskRun: store.TaskRun{RunID: run.ID, Name: "report", Handler: "http", State: "DEAD", Attempt: 3, MaxAttempts: 3, FencingToken: 6, Workflow: "nightly-report", FinishedAt: ago(90 * time.Second), Error: str("HTTP 503 from reports.internal"),
			Result: store.JSON(`{"exit_code":1,"stdout":"line 1\nline 2\nline 3\nline 4\nline 5\n","stderr":"warn: slow\nerror: \u001b[31mboom\n"}`)},
		Params: store.JSON(`{"url":"https://reports.internal/x"}`),
		Events: []core.TaskEvent{
			{ID: 1, At: *ago(10 * time.Minute), ToState: "PENDING", Actor: "trigger"},
			{ID: 2, At: *ago(9 * time.Minute), FromState: state("PENDING"), ToState: "READY", Actor: "scheduler-host1-1-aaaa"},
			{ID: 3, At: *ago(9 * time.Minute), FromState: state("READY"), ToState: "RUNNING", Attempt: 1, FencingToken: 1, WorkerID: &worker, Actor: worker, Reason: str("claimed")},
			{ID: 4, At: *ago(8 * time.Minute), FromState: state("RUNNING"), ToState: "DEAD", Attempt: 1, FencingToken: 1, WorkerID: &worker, Actor: worker, Reason: str("HTTP 503\x1b[31m")},
			{ID: 5, At: *ago(5 * time.Minute), FromState: state("DEAD"), ToState: "PENDING", Actor: "cli:ops@admin1", Reason: str("upstream fixed")},
		},
	}
	f.leases = []store.TaskRun{
		{ID: id(201), Name: "load", Workflow: "nightly-report", State: "RUNNING", WorkerID: str("worker-host2-77-dead"), FencingToken: 9, LeaseSeconds: f64(-4.2), HeartbeatAt: ago(34 * time.Second)},
		{ID: id(202), Name: "resize", Workflow: "image-resize", State: "RUNNING", WorkerID: &worker, FencingToken: 3, LeaseSeconds: f64(12.9), HeartbeatAt: ago(7 * time.Second)},
		{ID: id(203), Name: "load", Workflow: "nightly-report", State: "RUNNING", WorkerID: &worker, FencingToken: 2, LeaseSeconds: f64(21.4), HeartbeatAt: ago(2 * time.Second)},
	}
	f.outbox = OutboxData{
		Status: store.OutboxStatus{Pending: 2, OldestPendingSeconds: 3.5, PublishedLastMinute: 270, FailingRows: 1, Quarantined: 1},
		DB: store.DBHealth{OldestTransactionSeconds: 372, HorizonSeconds: 372, HorizonXIDs: 90210, DeadTuples: map[string]int64{"task_runs": 5120, "outbox": 880},
			Holder: &store.HorizonHolder{Kind: "session", Name: "4242", Application: "psql\x1b[2J", State: "idle in transaction", Seconds: 372, Query: "SELECT * FROM task_runs"}},
		HorizonWarn: 5 * time.Minute,
		Oldest: []store.PendingDispatch{
			{ID: 9001, TaskRunID: id(301), FencingToken: 1, TaskName: "extract", Workflow: "wordcount", AgeSeconds: 3.5, Attempts: 2, LastError: str("broker nack: queue full")},
			{ID: 9002, TaskRunID: id(302), FencingToken: 4, TaskName: "load", Workflow: "nightly-report", AgeSeconds: 0.2},
		},
	}
	f.dead = []store.TaskRun{
		{ID: id(401), RunID: id(3), Name: "charge", Workflow: "billing-sync", State: "DEAD", Attempt: 3, MaxAttempts: 3, FinishedAt: ago(42 * time.Second), Error: str("card declined\nstack...")},
		{ID: id(402), RunID: id(7), Name: "evil\x1b[2Jname", Workflow: "wordcount", State: "DEAD", Attempt: 1, MaxAttempts: 1, FinishedAt: ago(3 * time.Minute), Error: str("\x1b]52;c;ZXZpbA==\x07clipboard write attempt")},
		{ID: id(403), RunID: id(8), Name: "upload", Workflow: "image-resize", State: "DEAD", Attempt: 5, MaxAttempts: 5, FinishedAt: ago(26 * time.Hour), Error: str("permanent: 403 Forbidden")},
	}
	f.flows = []store.WorkflowSummary{
		{Name: "billing-sync", Version: 3, Tasks: 2, Runs: 17, CreatedAt: *ago(72 * time.Hour)},
		{Name: "nightly-report", Version: 1, Tasks: 5, Runs: 120, CreatedAt: *ago(30 * time.Minute)},
		{Name: "wordcount", Version: 2, Tasks: 4, Runs: 3, CreatedAt: *ago(5 * time.Minute)},
	}
	f.workers = []store.Worker{
		{ID: "all-host1-4242-a1b2", Role: "all", Hostname: "host1", PID: 4242, SecondsSinceSeen: 0.8, InFlight: 2,
			Handlers: store.StringList{"fail", "http", "noop", "sleep"}, Queue: str("flowforge.dispatch"), BrokerConnected: &yes, HealthAddr: str("127.0.0.1:8083")},
		{ID: "worker-host2-77-dead", Role: "worker", Hostname: "host2", PID: 77, SecondsSinceSeen: 95, InFlight: 1,
			Handlers: store.StringList{"noop", "shell", "sleep"}, Queue: str("gpu"), BrokerConnected: &no, HealthAddr: str("127.0.0.1:41237")},
		{ID: "publisher-host3-9-c3d4", Role: "publisher", Hostname: "host3", PID: 9, SecondsSinceSeen: 1.5},
	}
	return f
}
