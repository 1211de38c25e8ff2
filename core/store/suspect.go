package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// qMarkAlone records that the attempt holding token $2 of task run $1 has
// its handler started alone on its worker (a crash suspect's run, see
// Reap): alone_token takes the attempt's token. Fenced like a renewal:
// state RUNNING and the token.
const qMarkAlone = `
UPDATE task_runs t SET alone_token = t.fencing_token
 WHERE t.id = $1 AND t.state = 'RUNNING' AND t.fencing_token = $2
RETURNING t.id`

// MarkAlone records, before a suspect's handler starts, that the attempt
// of task id holding token runs alone on its worker (no other handler of
// that worker runs, and none starts until it ends). Should the worker then
// stop, the reaper counts this attempt (the suspect is the culprit); a
// suspect reaped while it waited for the others to end is not marked, and
// gets its attempt back. A finish of a marked attempt clears the suspicion
// (finishSet). ok=false (nil error) means the attempt lost its lease or
// ended: run nothing. The error is the database's, wrapped.
func (s *Store) MarkAlone(ctx context.Context, id uuid.UUID, token int64) (bool, error) {
	var got uuid.UUID
	err := s.db.QueryRowContext(ctx, qMarkAlone, id, token).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark task %s running alone: %w", id, err)
	}
	return true, nil
}
