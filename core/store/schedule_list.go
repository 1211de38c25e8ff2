package store

import (
	"context"
	"fmt"
)

// ListSchedulesLimit is ListSchedules bounded: the first limit schedules by
// name (limit <= 0: 100), each with its newest tick.
func (s *Store) ListSchedulesLimit(ctx context.Context, limit int) ([]Schedule, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.listSchedules(ctx, &limit)
}

// listSchedules is ListSchedules with LIMIT limit (nil: every schedule).
func (s *Store) listSchedules(ctx context.Context, limit *int) ([]Schedule, error) {
	var rows []scheduleRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+scheduleColumns+` FROM schedules ORDER BY name LIMIT $1`, limit); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		out[i] = r.schedule()
	}
	if err := s.attachTicks(ctx, out, 1); err != nil {
		return nil, err
	}
	return out, nil
}
