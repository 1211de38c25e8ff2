package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/failpoint"
)

// ScheduleStore is what the scheduler needs to fire schedule ticks.
type ScheduleStore interface {
	FireDueTicks(ctx context.Context, req store.FireRequest) (store.FireResult, error)
}

// fireTicks fires the schedule ticks due on the database's clock (one
// store.FireDueTicks pass: any number of schedulers may do it at once, a
// tick fires once), counts and logs each, and logs once each schedule
// whose stored cron or zone no longer parses. Nothing when
// Config.Schedules is nil.
func (s *Scheduler) fireTicks(ctx context.Context) error {
	if s.cfg.Schedules == nil {
		return nil
	}
	fps := s.cfg.Failpoints
	res, err := s.cfg.Schedules.FireDueTicks(ctx, store.FireRequest{
		Actor: s.cfg.ID, Grace: s.cfg.MisfireGrace,
		MidTick: func() { fps.ExitIf(failpoint.SchedulerExitMidTick) },
	})
	if err != nil {
		return fmt.Errorf("fire schedule ticks: %w", err)
	}
	for _, t := range res.Ticks {
		s.cfg.Metrics.ScheduleTicks.WithLabelValues(string(t.Outcome)).Inc()
		attrs := []any{"schedule", t.Schedule, "workflow", t.Workflow, "scheduled_at", t.ScheduledAt.UTC().Format(time.RFC3339), "outcome", string(t.Outcome)}
		switch {
		case t.Outcome == store.TickFired:
			attrs = append(attrs, "run_id", t.RunID.String())
			if len(t.Cancelled) > 0 {
				attrs = append(attrs, "cancelled_previous", fmt.Sprint(t.Cancelled))
			}
			s.log.Info("scheduler: fired schedule tick", attrs...)
		default:
			s.log.Warn("scheduler: fired schedule tick", append(attrs, "reason", t.Reason)...)
		}
	}
	if res.Missed > 0 {
		s.cfg.Metrics.ScheduleTicks.WithLabelValues("missed").Add(float64(res.Missed))
	}
	for _, d := range res.Dropped {
		s.log.Warn("scheduler: dropped missed schedule ticks (catch-up policy)", "schedule", d.Schedule, "count", d.Count,
			"first_missed", d.First.UTC().Format(time.RFC3339), "last_missed", d.Last.UTC().Format(time.RFC3339))
	}
	for name, err := range res.BadSpecs {
		if !s.badSpecs[name] {
			s.badSpecs[name] = true
			s.log.Error("scheduler: schedule cannot fire", "schedule", name, "error", err)
		}
	}
	return nil
}
