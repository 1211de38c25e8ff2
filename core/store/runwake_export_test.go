package store

import "github.com/google/uuid"

// QRunWake runs runWakeSQL over the runs $1 with the bounds $2 and $3, as
// qFinish does, and returns its payloads in order, for runwake_test.go's
// comparison with RunWake.Encode.
const QRunWake = `
WITH woken AS (
    SELECT unnest($1::uuid[]) AS run_id
), wake_bounds (per_payload, payloads_max) AS (
    SELECT $2::bigint, $3::bigint
), ` + runWakeSQL + `
SELECT payload FROM run_wake ORDER BY part`

// RunWakeArgs are QRunWake's parameters for runs: the runs, and the
// bounds qFinish binds (runWakeBounds).
func RunWakeArgs(runs []uuid.UUID) []any {
	return append([]any{uuidArray(runs)}, runWakeBounds()...)
}
