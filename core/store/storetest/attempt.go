package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Claim claims task id for worker with the fencing token its dispatch
// carried (a ClaimMany of one), as a worker holding that dispatch would,
// failing the test on an error. ok=false means the claim lost (see
// store.ClaimResult).
func Claim(t testing.TB, s *store.Store, id uuid.UUID, token int64, worker string, lease time.Duration) (store.ClaimedTask, bool) {
	t.Helper()
	res, err := s.ClaimMany(context.Background(), []store.ClaimRequest{{ID: id, Token: token}}, worker, lease)
	if err != nil {
		t.Fatalf("claim task %s with token %d: %v", id, token, err)
	}
	return res[0].Task, res[0].OK
}

// Finish records req (a FinishMany of one), failing the test on an error,
// the batch's or the row's (store.FinishResult.Err). It returns the task's
// new state; ok=false means the attempt's lease was lost and its outcome
// discarded.
func Finish(t testing.TB, s *store.Store, req store.FinishRequest) (core.TaskState, bool) {
	t.Helper()
	res, err := s.FinishMany(context.Background(), []store.FinishRequest{req})
	if err != nil {
		t.Fatalf("finish task %s with token %d: %v", req.ID, req.Token, err)
	}
	if res[0].Err != nil {
		t.Fatalf("finish task %s with token %d: %v", req.ID, req.Token, res[0].Err)
	}
	return res[0].State, res[0].OK
}

// ReapExpired reaps up to limit expired leases (store.Reap without an
// outage) with backoff as actor, failing the test on an error; it returns
// how many it reaped.
func ReapExpired(t testing.TB, s *store.Store, limit int, backoff store.BackoffFunc, actor string) int {
	t.Helper()
	res, err := s.Reap(context.Background(), store.ReapRequest{Limit: limit, Backoff: backoff, Actor: actor})
	if err != nil {
		t.Fatalf("reap expired leases: %v", err)
	}
	return res.Reaped
}

// FinishReady runs every READY task of run as a worker would: it claims
// each as worker "w1" and finishes it with req (its ID, Token and
// WorkerID filled in per task), then makes one scheduler pass, which
// promotes what follows and settles the run. It returns whether the run
// has ended. The test fails on an error or a lost claim.
func FinishReady(t testing.TB, s *store.Store, run uuid.UUID, req store.FinishRequest) bool {
	t.Helper()
	ctx := context.Background()
	r, err := s.GetRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range r.Tasks {
		if task.State != core.TaskReady {
			continue
		}
		ct, ok := Claim(t, s, task.ID, task.FencingToken, "w1", time.Minute)
		if !ok {
			t.Fatalf("claim %s lost", task.Name)
		}
		req.ID, req.Token, req.WorkerID = ct.ID, ct.FencingToken, "w1"
		Finish(t, s, req)
	}
	if _, err := s.Advance(ctx, nil, 100, "test-scheduler"); err != nil {
		t.Fatal(err)
	}
	r, err = s.GetRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	return r.Ended()
}

// Advance makes one scheduler pass over every open run (store.Advance, as
// "test-scheduler"), failing the test on an error: it promotes what is
// due, starts the tasks the scheduler holds (a wait_for's wait, a sleep, a
// child run) and settles the runs that have ended.
func Advance(t testing.TB, s *store.Store) store.AdvanceResult {
	t.Helper()
	res, err := s.Advance(context.Background(), nil, 1000, "test-scheduler")
	if err != nil {
		t.Fatalf("scheduler pass: %v", err)
	}
	return res
}
