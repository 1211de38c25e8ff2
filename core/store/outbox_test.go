package store_test

import (
	"encoding/json"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// fillOutbox triggers n one-task runs: n pending outbox rows.
func (f *fixture) fillOutbox(n int) {
	f.t.Helper()
	f.apply(oneTask)
	for range n {
		f.trigger("one", "")
	}
}

func TestConcurrentOutboxBatchesAreDisjoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fillOutbox(10)
	b1, err := f.s.LockOutbox(f.ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b1.Rollback() })
	b2, err := f.s.LockOutbox(f.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Rollback() })
	if len(b1.Rows) != 4 || len(b2.Rows) != 6 {
		t.Fatalf("batches of %d and %d rows, want 4 and 6", len(b1.Rows), len(b2.Rows))
	}
	seen := map[int64]bool{}
	for _, r := range append(append([]store.OutboxRow(nil), b1.Rows...), b2.Rows...) {
		if seen[r.ID] {
			t.Fatalf("row %d is in both batches", r.ID)
		}
		seen[r.ID] = true
	}
	// Oldest first.
	for i := 1; i < len(b1.Rows); i++ {
		if b1.Rows[i].ID <= b1.Rows[i-1].ID {
			t.Fatalf("batch not in id order: %v", b1.Rows)
		}
	}
	// A third publisher finds nothing left to lock.
	b3, err := f.s.LockOutbox(f.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(b3.Rows) != 0 {
		t.Fatalf("a third batch got %d rows", len(b3.Rows))
	}
	b3.Rollback()
}

func TestOutboxRowsStayPendingAfterRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fillOutbox(3)
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int64{b.Rows[0].ID, b.Rows[1].ID, b.Rows[2].ID}
	if err := b.MarkPublished(f.ctx, ids); err != nil {
		t.Fatal(err)
	}
	if err := b.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE published_at IS NULL AND publish_attempts = 0`); n != 3 {
		t.Fatalf("%d rows pending and untouched after rollback, want 3", n)
	}
	b, err = f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if len(b.Rows) != 3 {
		t.Fatalf("the next batch got %d rows, want 3", len(b.Rows))
	}
	var p struct {
		TaskRunID string `json:"task_run_id"`
		RunID     string `json:"run_id"`
		Token     int64  `json:"fencing_token"`
		Task      string `json:"task"`
	}
	if err := json.Unmarshal(b.Rows[0].Payload, &p); err != nil || p.TaskRunID == "" || p.RunID == "" || p.Token != 1 || p.Task != "a" {
		t.Fatalf("payload %s: %+v %v", b.Rows[0].Payload, p, err)
	}
}

func TestMarkPublishedStampsOnlyTheGivenRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fillOutbox(5)
	st, err := f.s.OutboxStatus(f.ctx)
	if err != nil || st.Pending != 5 || st.PublishedLastMinute != 0 || st.FailingRows != 0 || st.OldestPendingSeconds < 0 {
		t.Fatalf("status before: %+v %v", st, err)
	}
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	published := []int64{b.Rows[0].ID, b.Rows[2].ID}
	failed := []int64{b.Rows[3].ID}
	if err := b.MarkPublished(f.ctx, published); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkFailed(f.ctx, failed, "nacked"); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkPublished(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := b.Rollback(); err == nil {
		t.Log("Rollback after Commit returned nil")
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND id = ANY ($1::bigint[]) AND publish_attempts = 1`, published); n != 2 {
		t.Fatalf("%d of the 2 given rows stamped", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`); n != 2 {
		t.Fatalf("%d rows stamped, want only the 2 given", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE id = $1 AND published_at IS NULL AND publish_attempts = 1 AND last_error = 'nacked'`, failed[0]); n != 1 {
		t.Fatal("the failed row was not recorded as a failed attempt")
	}
	st, err = f.s.OutboxStatus(f.ctx)
	if err != nil || st.Pending != 3 || st.PublishedLastMinute != 2 || st.FailingRows != 1 {
		t.Fatalf("status after: %+v %v; want pending 3, published 2, failing 1", st, err)
	}
	// A stamped row is never stamped again.
	b, err = f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if len(b.Rows) != 3 {
		t.Fatalf("%d rows pending, want 3", len(b.Rows))
	}
	for _, r := range b.Rows {
		if r.ID == published[0] || r.ID == published[1] {
			t.Fatalf("published row %d offered again", r.ID)
		}
	}
}

func TestOutboxStatusOfAnEmptyOutbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	st, err := f.s.OutboxStatus(f.ctx)
	if err != nil || st.Pending != 0 || st.OldestPendingSeconds != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil || len(b.Rows) != 0 {
		t.Fatalf("%v %v", b, err)
	}
	b.Rollback()
}
