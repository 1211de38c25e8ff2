package tui

import (
	"context"
	"fmt"

	"github.com/flowforge/flowforge/core/store"
)

// Schedules reads the clock and the schedules (bounded).
func (s *StoreSource) Schedules(ctx context.Context) (SchedulesData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return SchedulesData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	scheds, err := s.Store.ListSchedulesLimit(ctx, SchedulesLimit)
	if err != nil {
		return SchedulesData{}, s.classify(ctx, err)
	}
	return SchedulesData{Now: now, Schedules: scheds}, nil
}

// Schedule reads one schedule and its last ticks.
func (s *StoreSource) Schedule(ctx context.Context, name string) (ScheduleData, error) {
	sc, err := s.Store.GetSchedule(ctx, name)
	if err != nil {
		return ScheduleData{}, s.classify(ctx, err)
	}
	return ScheduleData{Now: sc.ReadAt, Schedule: sc}, nil
}

// PauseSchedule pauses the schedule, audited as Actor.
func (s *StoreSource) PauseSchedule(ctx context.Context, name, reason string) (bool, error) {
	return s.Store.PauseSchedule(ctx, name, s.Actor, reason)
}

// ResumeSchedule resumes the schedule, audited as Actor.
func (s *StoreSource) ResumeSchedule(ctx context.Context, name, reason string) (bool, error) {
	return s.Store.ResumeSchedule(ctx, name, s.Actor, reason)
}

// TriggerScheduleNow fires a manual tick of the schedule, audited as Actor.
func (s *StoreSource) TriggerScheduleNow(ctx context.Context, name, reason string) (store.Tick, error) {
	return s.Store.TriggerScheduleNow(ctx, name, s.Actor, reason)
}
