package scheduler

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// advanceNamed runs targeted passes (store.AdvanceRuns) over ids,
// BatchSize runs a transaction, and keeps for a later turn (s.held) every
// run it could not advance: those another transaction held
// (AdvanceResult.Held) and those of a batch that failed. A batch the
// database refused (an answer, such as a lock or statement timeout) is
// logged and the next batch runs: it neither stops the turn and its sweep
// nor counts as an outage. When the database could not be reached
// (store.IsUnreachable) it returns the error at once, the runs of the
// later batches kept too.
func (s *Scheduler) advanceNamed(ctx context.Context, ids []uuid.UUID) error {
	for len(ids) > 0 {
		n := min(len(ids), s.cfg.BatchSize)
		batch := ids[:n]
		ids = ids[n:]
		start := s.cfg.Clock.Now()
		res, err := s.cfg.Store.AdvanceRuns(ctx, batch, s.cfg.ID)
		if err != nil {
			s.held.keep(s.cfg.Clock.Now(), batch...)
			if store.IsUnreachable(err) {
				s.held.keep(s.cfg.Clock.Now(), ids...)
				return fmt.Errorf("advance named runs: %w", err)
			}
			s.log.Warn("scheduler: targeted pass refused by the database; its runs are passed again later", "error", err, "runs", n)
			continue
		}
		s.record(res)
		s.tracePromotions(res.Traced, start)
		s.keepHeld(res.Held)
	}
	return nil
}

// keepHeld keeps the runs a targeted pass handed back (another transaction
// held them) for a later turn, logging at Warn when some have stayed held
// through the whole ramp of retries (a session left holding them).
func (s *Scheduler) keepHeld(held []uuid.UUID) {
	if len(held) == 0 {
		return
	}
	s.signals.heldDone(held)
	capped := s.held.keep(s.cfg.Clock.Now(), held...)
	if capped {
		s.log.Warn("scheduler: runs still held by another transaction; passed again every sweep interval until it lets go",
			"runs", len(held), "run_id", held[0].String())
		return
	}
	s.log.Debug("scheduler: runs held by another transaction; passed again later", "runs", len(held), "run_id", held[0].String())
}
