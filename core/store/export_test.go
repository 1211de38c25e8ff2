package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// The single-task forms of ClaimMany, FinishMany and Reap that this
// package's tests use; no daemon calls them (the worker batches, the
// scheduler reaps with a ReapRequest), so they live here, not in the
// production type. Other packages' tests have the same in storetest.

// Claim is a ClaimMany of one: ok=false (nil error) when the claim lost
// (see ClaimResult).
func (s *Store) Claim(ctx context.Context, id uuid.UUID, token int64, workerID string, lease time.Duration) (ClaimedTask, bool, error) {
	res, err := s.ClaimMany(ctx, []ClaimRequest{{ID: id, Token: token}}, workerID, lease)
	if err != nil {
		return ClaimedTask{}, false, fmt.Errorf("claim task %s: %w", id, err)
	}
	return res[0].Task, res[0].OK, nil
}

// Finish is a FinishMany of one: ok=false (nil error) when the lease was
// lost; the row's own error (FinishResult.Err) is returned as the error.
func (s *Store) Finish(ctx context.Context, req FinishRequest) (core.TaskState, bool, error) {
	res, err := s.FinishMany(ctx, []FinishRequest{req})
	if err != nil {
		return "", false, fmt.Errorf("finish task %s: %w", req.ID, err)
	}
	return res[0].State, res[0].OK, res[0].Err
}

// ReapExpired is Reap without an outage: how many expired leases it
// reaped (up to limit).
func (s *Store) ReapExpired(ctx context.Context, limit int, backoff BackoffFunc, actor string) (int, error) {
	res, err := s.Reap(ctx, ReapRequest{Limit: limit, Backoff: backoff, Actor: actor})
	return res.Reaped, err
}

// SetAdmitBatch makes each admission round admit at most n task runs per
// key (AdmitBatchMax in production).
func (s *Store) SetAdmitBatch(n int) { s.admitBatch = n }

// AgeStreamMark makes a pending stream mark look taken d earlier (the
// patience of LockStream's fallback).
func AgeStreamMark(m *StreamMark, d time.Duration) { m.takenAt = m.takenAt.Add(-d) }
