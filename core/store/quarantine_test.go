package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// Mode 44: the batch transaction outlives the daemon's context.

// TestAnOutboxBatchCommitsItsStampsAfterItsContextIsCancelled locks a batch
// with a context that is then cancelled (a shutdown signal between the
// broker's confirm and the stamp) and stamps with a fresh context, as the
// publisher does: the stamp must commit. database/sql rolls back a
// transaction whose BeginTx context is cancelled, so before the fix the
// stamp was lost.
func TestAnOutboxBatchCommitsItsStampsAfterItsContextIsCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fillOutbox(2)
	ctx, cancel := context.WithCancel(f.ctx)
	b, err := f.s.LockOutbox(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Rollback() })
	if len(b.Rows) != 2 {
		t.Fatalf("locked %d rows, want 2", len(b.Rows))
	}
	cancel()
	// database/sql watches the context in a goroutine: give it every
	// chance to act before the stamp is written.
	<-ctx.Done()
	if err := b.MarkPublished(f.ctx, []int64{b.Rows[0].ID, b.Rows[1].ID}); err != nil {
		t.Fatalf("stamp after the context was cancelled: %v", err)
	}
	if err := b.Commit(); err != nil {
		t.Fatalf("commit after the context was cancelled: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND publish_attempts = 1`); n != 2 {
		t.Fatalf("%d rows stamped, want 2", n)
	}
}

// TestLockOutboxHonoursACancelledContext: the context still bounds taking
// a connection and the locking query.
func TestLockOutboxHonoursACancelledContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fillOutbox(1)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := f.s.LockOutbox(ctx, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("LockOutbox with a cancelled context: %v, want context.Canceled", err)
	}
	// Nothing leaked: the row can be locked again.
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if len(b.Rows) != 1 {
		t.Fatalf("locked %d rows, want 1", len(b.Rows))
	}
}

// Mode 37: a row the broker refuses permanently is quarantined.

// quarantineFirst triggers n one-task runs, quarantines the oldest row
// with reason and commits; it returns that row's id.
func (f *fixture) quarantineFirst(n int, reason string) int64 {
	f.t.Helper()
	f.fillOutbox(n)
	b, err := f.s.LockOutbox(f.ctx, 1)
	if err != nil {
		f.t.Fatal(err)
	}
	defer b.Rollback()
	id := b.Rows[0].ID
	got, err := b.Quarantine(f.ctx, []int64{id}, "publisher", reason)
	if err != nil || got != 1 {
		f.t.Fatalf("quarantine row %d: n=%d err=%v", id, got, err)
	}
	if err := b.Commit(); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func TestAQuarantinedRowIsSkippedCountedAndListed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.quarantineFirst(3, "too big")

	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Rows {
		if r.ID == id {
			t.Fatalf("the quarantined row %d was locked for publishing", id)
		}
	}
	if len(b.Rows) != 2 {
		t.Fatalf("locked %d rows, want the 2 others", len(b.Rows))
	}
	b.Rollback()

	st, err := f.s.OutboxStatus(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.Quarantined != 1 || st.FailingRows != 0 {
		t.Fatalf("status %+v, want pending 2, quarantined 1, failing 0", st)
	}
	raw, _ := json.Marshal(st)
	if !strings.Contains(string(raw), `"quarantined":1`) {
		t.Fatalf("status JSON %s lacks quarantined", raw)
	}
	pend, err := f.s.OldestPendingDispatches(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 2 {
		t.Fatalf("%d pending dispatches listed, want 2 (the quarantined row is not pending)", len(pend))
	}

	rows, err := f.s.ListQuarantined(f.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != id || rows[0].Reason != "too big" || rows[0].TaskState != "READY" || rows[0].PayloadBytes <= 0 || rows[0].Attempts != 1 {
		t.Fatalf("quarantined rows %+v", rows)
	}
	ev, err := f.s.OutboxEvents(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Action != store.OutboxActionQuarantine || ev[0].Actor != "publisher" || ev[0].Reason != "too big" {
		t.Fatalf("audit %+v", ev)
	}
}

func TestRetryMakesAQuarantinedRowPendingAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.quarantineFirst(1, "too big")
	if err := f.s.RetryQuarantined(f.ctx, id, "cli:ann@host", "limit raised"); err != nil {
		t.Fatal(err)
	}
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if len(b.Rows) != 1 || b.Rows[0].ID != id {
		t.Fatalf("after retry the batch is %v, want row %d", b.Rows, id)
	}
	ev, err := f.s.OutboxEvents(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 || ev[1].Action != store.OutboxActionRetry || ev[1].Actor != "cli:ann@host" || ev[1].Reason != "limit raised" {
		t.Fatalf("audit %+v", ev)
	}
}

func TestDropBuriesTheTaskDeadWithTheReason(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.quarantineFirst(2, "too big")
	var task uuid.UUID
	if err := f.db.QueryRowContext(f.ctx, `SELECT task_run_id FROM outbox WHERE id = $1`, id).Scan(&task); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.DropQuarantined(f.ctx, id, "cli:ann@host", "payload cannot be fixed")
	if err != nil {
		t.Fatal(err)
	}
	if !res.TaskBuried || res.TaskState != "DEAD" || res.TaskRunID != task {
		t.Fatalf("drop result %+v", res)
	}
	d := f.task(task)
	if d.State != "DEAD" || d.Error == nil || !strings.Contains(*d.Error, "payload cannot be fixed") {
		t.Fatalf("task after drop: state %s error %v", d.State, d.Error)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = 'READY' AND to_state = 'DEAD' AND actor = 'cli:ann@host' AND reason LIKE '%payload cannot be fixed'`, task); n != 1 {
		t.Fatalf("%d READY -> DEAD audit rows, want 1", n)
	}
	// Kept, marked dropped, neither pending nor quarantined any more.
	if n := f.count(`SELECT count(*) FROM outbox WHERE id = $1 AND dropped_at IS NOT NULL AND published_at IS NULL`, id); n != 1 {
		t.Fatal("the dropped row is not kept as dropped")
	}
	st, err := f.s.OutboxStatus(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Quarantined != 0 || st.Pending != 1 {
		t.Fatalf("status after drop %+v", st)
	}
	ev, err := f.s.OutboxEvents(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 || ev[1].Action != store.OutboxActionDrop || ev[1].Reason != "payload cannot be fixed" {
		t.Fatalf("audit %+v", ev)
	}
}

func TestDropOfARowWhoseTaskMovedOnLeavesTheTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.quarantineFirst(1, "too big")
	var task, run uuid.UUID
	if err := f.db.QueryRowContext(f.ctx, `SELECT o.task_run_id, t.run_id FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE o.id = $1`, id).Scan(&task, &run); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CancelRun(f.ctx, run, "test", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.DropQuarantined(f.ctx, id, "cli:ann@host", "cleanup")
	if err != nil {
		t.Fatal(err)
	}
	if res.TaskBuried || res.TaskState != "CANCELLED" {
		t.Fatalf("drop result %+v, want the CANCELLED task left alone", res)
	}
}

func TestRetryAndDropRefuseRowsThatAreNotQuarantined(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dropped := f.quarantineFirst(3, "too big")
	if _, err := f.s.DropQuarantined(f.ctx, dropped, "test", "x"); err != nil {
		t.Fatal(err)
	}
	var pending, published int64
	if err := f.db.QueryRowContext(f.ctx, `SELECT min(id), max(id) FROM outbox WHERE quarantined_at IS NULL`).Scan(&pending, &published); err != nil {
		t.Fatal(err)
	}
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkPublished(f.ctx, []int64{published}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		id   int64
		want error
		text string
	}{
		{"unknown", 1 << 40, store.ErrNotFound, "not found"},
		{"pending", pending, store.ErrNotQuarantined, "it is pending"},
		{"published", published, store.ErrNotQuarantined, "it is published"},
		{"dropped", dropped, store.ErrNotQuarantined, "it is dropped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := f.s.RetryQuarantined(f.ctx, c.id, "test", "x")
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("retry: %v, want %v (%s)", err, c.want, c.text)
			}
			_, err = f.s.DropQuarantined(f.ctx, c.id, "test", "x")
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("drop: %v, want %v (%s)", err, c.want, c.text)
			}
		})
	}
	if n := f.count(`SELECT count(*) FROM outbox_events WHERE action <> 'quarantine'`); n != 1 {
		t.Fatalf("%d retry/drop audit rows, want only the first drop's", n)
	}
}

// TestConcurrentRetryAndDropOfOneRowExactlyOneWins races retries against
// drops of one quarantined row on real PostgreSQL: exactly one call
// succeeds, the others get ErrNotQuarantined.
func TestConcurrentRetryAndDropOfOneRowExactlyOneWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.quarantineFirst(1, "too big")
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = f.s.RetryQuarantined(f.ctx, id, "test", "retry")
			} else {
				_, errs[i] = f.s.DropQuarantined(f.ctx, id, "test", "drop")
			}
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNotQuarantined):
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d calls succeeded, want exactly 1", won)
	}
	if c := f.count(`SELECT count(*) FROM outbox_events WHERE action <> 'quarantine'`); c != 1 {
		t.Fatalf("%d audit rows, want 1", c)
	}
}
