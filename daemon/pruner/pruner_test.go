package pruner

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/logtest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

const day = 24 * time.Hour

// TestValidateBoundsEverySetting: each setting out of its bounds is a
// *daemon.SettingError naming the flag; zero is the default (RetainDead:
// off).
func TestValidateBoundsEverySetting(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: time.Millisecond}, "pruner: --prune-interval 1ms (Config.Interval): must be between 1s and 24h0m0s, or 0 for the default (1m0s)"},
		{Config{Interval: -time.Second}, "pruner: --prune-interval -1s (Config.Interval): must be between 1s and 24h0m0s, or 0 for the default (1m0s)"},
		{Config{RetainSucceeded: time.Second}, "pruner: --retain-succeeded 1s (Config.RetainSucceeded): must be between 1m0s and 87600h0m0s, or 0 for the default (168h0m0s)"},
		{Config{RetainCancelled: 4000 * day}, "pruner: --retain-cancelled 96000h0m0s (Config.RetainCancelled): must be between 1m0s and 87600h0m0s, or 0 for the default (168h0m0s)"},
		{Config{RetainOutbox: -time.Hour}, "pruner: --retain-outbox -1h0m0s (Config.RetainOutbox): must be between 1m0s and 87600h0m0s, or 0 for the default (24h0m0s)"},
		{Config{RetainDead: time.Second}, "pruner: --retain-dead 1s (Config.RetainDead): must be between 1m0s and 87600h0m0s, or 0 (the default) never to prune a run holding a DEAD task"},
		{Config{BatchSize: -1}, "pruner: Config.BatchSize -1: must be between 1 and 10000, or 0 for the default (500)"},
		{Config{BatchSize: 10001}, "pruner: Config.BatchSize 10001: must be between 1 and 10000, or 0 for the default (500)"},
	} {
		if err := tc.cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v\nwant %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{}); err == nil || err.Error() != "pruner: Store is required" {
		t.Errorf("New without a Store: %v", err)
	}
}

// rig is a migrated throwaway database with a workflow of one task.
type rig struct {
	t   *testing.T
	s   *store.Store
	db  *sql.DB
	url string
}

func newRig(t *testing.T) *rig {
	s, db, url := storetest.NewWithDB(t)
	storetest.Apply(t, s, "name: one\ntasks:\n  - {name: a, handler: noop}\n")
	return &rig{t: t, s: s, db: db, url: url}
}

// settled makes a run whose task ended taskState and which settled in
// runState ago ago (database clock), as the scheduler would record it.
func (r *rig) settled(runState, taskState string, ago time.Duration) uuid.UUID {
	r.t.Helper()
	id := storetest.Trigger(r.t, r.s, "one", "")
	for _, q := range []string{
		`UPDATE task_runs SET state = $2, finished_at = now() - $3::bigint * interval '1 millisecond' WHERE run_id = $1 AND $4::text IS NOT NULL`,
		`UPDATE workflow_runs SET state = $4, finished_at = now() - $3::bigint * interval '1 millisecond' WHERE id = $1 AND $2::text IS NOT NULL`,
	} {
		if _, err := r.db.ExecContext(r.t.Context(), q, id, taskState, ago.Milliseconds(), runState); err != nil {
			r.t.Fatalf("%s: %v", q, err)
		}
	}
	return id
}

func (r *rig) exists(id uuid.UUID) bool {
	r.t.Helper()
	var n int
	if err := r.db.QueryRowContext(r.t.Context(), `SELECT count(*) FROM workflow_runs WHERE id = $1`, id).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n == 1
}

// TestAPassPrunesEachClassByItsAgeAndDeadOnlyWithOptIn: without
// RetainDead a FAILED run (and a CANCELLED one holding a DEAD task) is
// kept however old; SUCCEEDED and CANCELLED runs go after their ages;
// metrics count by table and state; one log line per pass that pruned.
// With RetainDead set, the DEAD-holding runs older than it go too.
func TestAPassPrunesEachClassByItsAgeAndDeadOnlyWithOptIn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	oldOK := r.settled("SUCCEEDED", "SUCCEEDED", 8*day)
	newOK := r.settled("SUCCEEDED", "SUCCEEDED", 6*day)
	oldCancelled := r.settled("CANCELLED", "CANCELLED", 3*day)
	oldFailed := r.settled("FAILED", "DEAD", 400*day)
	cancelledDead := r.settled("CANCELLED", "DEAD", 400*day)
	var logs logtest.Buffer
	m := metrics.New()
	p, err := New(Config{Store: r.s, RetainCancelled: 2 * day, Metrics: m, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.RunOnce(t.Context())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	if tot := res.Total(); tot.Runs != 2 || tot.TaskRuns != 2 {
		t.Fatalf("pass deleted %+v, want 2 runs and 2 task runs", tot)
	}
	for id, want := range map[uuid.UUID]bool{oldOK: false, newOK: true, oldCancelled: false, oldFailed: true, cancelledDead: true} {
		if got := r.exists(id); got != want {
			t.Errorf("run %s exists %v, want %v", id, got, want)
		}
	}
	for _, c := range []struct {
		table, state string
		want         float64
	}{{"workflow_runs", "SUCCEEDED", 1}, {"task_runs", "SUCCEEDED", 1}, {"workflow_runs", "CANCELLED", 1}, {"workflow_runs", "FAILED", 0}, {"outbox", "SUCCEEDED", 1}} {
		if v := testutil.ToFloat64(p.m.Rows.WithLabelValues(c.table, c.state)); v != c.want {
			t.Errorf("flowforge_pruned_rows_total{table=%q,state=%q} = %v, want %v", c.table, c.state, v, c.want)
		}
	}
	if n := strings.Count(logs.String(), `"msg":"pruner: pruned"`); n != 1 {
		t.Fatalf("%d 'pruner: pruned' lines, want 1:\n%s", n, logs.String())
	}
	if res, err := p.RunOnce(t.Context()); err != nil || res.Total().Runs != 0 {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
	if n := strings.Count(logs.String(), `"msg":"pruner: pruned"`); n != 1 {
		t.Fatalf("a pass that pruned nothing logged: %d lines", n)
	}

	p2, err := New(Config{Store: r.s, RetainDead: 30 * day})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p2.RunOnce(t.Context()); err != nil || res.Runs["FAILED"].Runs != 1 || res.Runs["CANCELLED"].Runs != 1 {
		t.Fatalf("pass with RetainDead: %+v, %v", res, err)
	}
	if r.exists(oldFailed) || r.exists(cancelledDead) || !r.exists(newOK) {
		t.Fatal("RetainDead did not prune the DEAD-holding runs, or pruned a new one")
	}
}

// TestABatchAtATime: a pass deletes BatchSize runs per transaction until
// one comes up short, and prunes published outbox rows past their age.
func TestABatchAtATime(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for range 7 {
		r.settled("SUCCEEDED", "SUCCEEDED", 8*day)
	}
	open := storetest.Trigger(t, r.s, "one", "")
	if _, err := r.db.ExecContext(t.Context(), `UPDATE outbox SET published_at = now() - interval '2 days'`); err != nil {
		t.Fatal(err)
	}
	var batches []int64
	p, err := New(Config{Store: r.s, BatchSize: 3, afterBatch: func(c store.PruneCounts) { batches = append(batches, c.Runs) }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// SUCCEEDED: 3, 3, 1; CANCELLED: 0.
	if len(batches) != 4 || batches[0] != 3 || batches[1] != 3 || batches[2] != 1 || batches[3] != 0 {
		t.Fatalf("batches %v, want [3 3 1 0]", batches)
	}
	// The open run's task is READY: its dispatch is kept.
	if res.Outbox != 0 || !r.exists(open) {
		t.Fatalf("outbox pruned %d rows (the open run's READY dispatch must stay); open run exists %v", res.Outbox, r.exists(open))
	}
}

// TestRunPrunesAtOnceAndStopsWithItsContext: Run's first pass comes at
// once; cancelling its context ends it with nil.
func TestRunPrunesAtOnceAndStopsWithItsContext(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	id := r.settled("SUCCEEDED", "SUCCEEDED", 8*day)
	p, err := New(Config{Store: r.s, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for r.exists(id) {
		if time.Now().After(deadline) {
			t.Fatal("Run's first pass did not prune the run")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestBetweenBatchesThePrunerHoldsNoSnapshot: a long pass is many short
// transactions, so between two batches no session of the pruner holds a
// snapshot (backend_xmin) or transaction id that would pin VACUUM's
// horizon.
func TestBetweenBatchesThePrunerHoldsNoSnapshot(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for range 9 {
		r.settled("SUCCEEDED", "SUCCEEDED", 8*day)
	}
	// The pruner's own sessions carry an application_name of their own
	// (the server also serves other tests' sessions).
	ps, err := store.Open(t.Context(), r.url+"&application_name=pruner-under-test", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	var held []int
	p, err := New(Config{Store: ps, BatchSize: 2, afterBatch: func(store.PruneCounts) {
		var n int
		if err := r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
 WHERE application_name = 'pruner-under-test' AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)`).Scan(&n); err != nil {
			t.Error(err)
		}
		held = append(held, n)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(held) < 5 {
		t.Fatalf("%d batches, want at least 5", len(held))
	}
	// The check sees the pruner's sessions at all: they are there, idle.
	var sessions int
	if err := r.db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pruner-under-test'`).Scan(&sessions); err != nil || sessions == 0 {
		t.Fatalf("no session of the pruner found (%d, %v): the check sees nothing", sessions, err)
	}
	for i, n := range held {
		if n != 0 {
			t.Fatalf("after batch %d, %d of the pruner's sessions hold a snapshot or transaction id: %v", i, n, held)
		}
	}
}
