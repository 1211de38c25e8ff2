package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestALostDispatchIsRedispatchedWithTheSameToken: a READY task whose
// confirmed message never led to a claim gets a second outbox row with the
// same token; either copy can claim, and only one claim wins.
func TestALostDispatchIsRedispatchedWithTheSameToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := storetest.New(t)
	storetest.Apply(t, s, "name: lost\ntasks:\n  - {name: a, handler: noop}\n")
	storetest.Trigger(t, s, "lost", "")
	// A pending row is never redispatched.
	if n, err := s.Redispatch(ctx, 0, 10, "test"); err != nil || n != 0 {
		t.Fatalf("redispatch with a pending row: n=%d err=%v, want 0", n, err)
	}
	b, err := s.LockOutbox(ctx, 10)
	if err != nil || len(b.Rows) != 1 {
		t.Fatalf("lock outbox: %v rows=%d", err, len(b.Rows))
	}
	first := b.Rows[0]
	if err := b.MarkPublished(ctx, []int64{first.ID}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// Recently confirmed: not yet.
	if n, err := s.Redispatch(ctx, time.Hour, 10, "test"); err != nil || n != 0 {
		t.Fatalf("redispatch of a fresh dispatch: n=%d err=%v, want 0", n, err)
	}
	if n, err := s.Redispatch(ctx, 0, 10, "test"); err != nil || n != 1 {
		t.Fatalf("redispatch of a stale dispatch: n=%d err=%v, want 1", n, err)
	}
	if n, err := s.Redispatch(ctx, 0, 10, "test"); err != nil || n != 0 {
		t.Fatalf("second redispatch while the copy is pending: n=%d err=%v, want 0", n, err)
	}
	b, err = s.LockOutbox(ctx, 10)
	if err != nil || len(b.Rows) != 1 {
		t.Fatalf("lock outbox: %v rows=%d", err, len(b.Rows))
	}
	var m1, m2 struct {
		ID    string `json:"task_run_id"`
		Token int64  `json:"fencing_token"`
	}
	json.Unmarshal(first.Payload, &m1)
	json.Unmarshal(b.Rows[0].Payload, &m2)
	b.Rollback()
	if m1 != m2 {
		t.Fatalf("redispatched payload %+v differs from the first %+v", m2, m1)
	}
	id := uuid.MustParse(m1.ID)
	if _, ok, err := s.Claim(ctx, id, m2.Token, "w1", time.Minute); err != nil || !ok {
		t.Fatalf("claim with the redispatched message: ok=%v err=%v", ok, err)
	}
	if _, ok, _ := s.Claim(ctx, id, m1.Token, "w2", time.Minute); ok {
		t.Fatal("the original message also claimed")
	}
}
