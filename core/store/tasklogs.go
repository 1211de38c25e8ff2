package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// TaskLogLine is one line of a task's log (table task_logs): the Seq-th
// line (from 1) of attempt Attempt of task run TaskRunID, logged at
// LoggedAt (the worker's clock) on Stream; Level is the slog level's name
// for core.LogStreamLog, "" otherwise.
type TaskLogLine struct {
	TaskRunID uuid.UUID      `db:"task_run_id" json:"task_run_id"`
	Attempt   int            `db:"attempt" json:"attempt"`
	Seq       int            `db:"seq" json:"seq"`
	LoggedAt  time.Time      `db:"logged_at" json:"time"`
	Stream    core.LogStream `db:"stream" json:"stream"`
	Level     string         `db:"level" json:"level,omitempty"`
	Line      string         `db:"line" json:"line"`
}

// ErrBadTaskLog is wrapped by InsertTaskLogs' refusal of a batch with a
// line on no known stream (core.LogStreams) or with an attempt or seq
// below 1; nothing of the batch is written.
var ErrBadTaskLog = errors.New("bad task log line")

// qInsertTaskLogs inserts a batch of lines given as arrays (one element
// per line), skipping lines already written (a retried batch: the primary
// key) and lines of a task run that no longer exists (pruned or deleted
// while the batch waited). A line committed while a prune of its run is
// in flight may outlive it: the writer flushes an attempt's lines beside
// its finish, long before its run can be pruned.
const qInsertTaskLogs = `
INSERT INTO task_logs (task_run_id, attempt, seq, logged_at, stream, level, line)
SELECT l.task_run_id, l.attempt, l.seq, l.logged_at, l.stream, NULLIF(l.level, ''), l.line
  FROM unnest($1::uuid[], $2::int[], $3::int[], $4::timestamptz[], $5::text[], $6::text[], $7::text[])
       AS l(task_run_id, attempt, seq, logged_at, stream, level, line)
 WHERE EXISTS (SELECT 1 FROM task_runs t WHERE t.id = l.task_run_id)
ON CONFLICT (task_run_id, attempt, seq) DO NOTHING`

// InsertTaskLogs writes lines (of any task runs and attempts) in one
// statement, its own transaction, and returns how many rows it inserted:
// lines already stored (same task run, attempt and seq) and lines of a
// task run that does not exist are skipped, so a batch may be retried
// whole. Each line's text is sanitised again (core.SanitizeLogLine: at
// most core.MaxTaskLogLineBytes; a line the worker sanitised comes through
// unchanged): PostgreSQL's text refuses NUL. It never
// touches task_runs: a late batch of an attempt whose lease was lost
// writes that attempt's lines only. Errors: ErrBadTaskLog (nothing
// written), or the database's.
func (s *Store) InsertTaskLogs(ctx context.Context, lines []TaskLogLine) (int64, error) {
	if len(lines) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(lines))
	attempts := make([]int32, len(lines))
	seqs := make([]int32, len(lines))
	times := make([]time.Time, len(lines))
	streams := make([]string, len(lines))
	levels := make([]string, len(lines))
	texts := make([]string, len(lines))
	for i, l := range lines {
		if !slices.Contains(core.LogStreams(), l.Stream) || l.Attempt < 1 || l.Seq < 1 {
			return 0, fmt.Errorf("insert task logs: %w: task run %s, attempt %d, seq %d, stream %q", ErrBadTaskLog, l.TaskRunID, l.Attempt, l.Seq, l.Stream)
		}
		ids[i], attempts[i], seqs[i], times[i] = l.TaskRunID, int32(l.Attempt), int32(l.Seq), l.LoggedAt
		streams[i], levels[i] = string(l.Stream), core.SanitizeText(l.Level, 16)
		texts[i] = core.SanitizeLogLine(l.Line)
	}
	res, err := s.db.ExecContext(ctx, qInsertTaskLogs, s.args(uuidArray(ids), attempts, seqs, times, streams, levels, texts)...)
	if err != nil {
		return 0, fmt.Errorf("insert task logs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("insert task logs: %w", err)
	}
	return n, nil
}

// TaskLogQuery selects lines of one task run's log: of attempt Attempt
// only (0: every attempt), after the line (AfterAttempt, AfterSeq) in
// the log's order (logOrder; zeros: from the start), at most Limit lines
// (0: TaskLogPageDefault).
type TaskLogQuery struct {
	TaskRunID    uuid.UUID
	Attempt      int
	AfterAttempt int
	AfterSeq     int
	Limit        int
}

// TaskLogPageDefault is the lines one TaskLogs call returns by default.
const TaskLogPageDefault = 1000

// logOrder is the order of a task run's log: first the lines of the
// rounds before its last requeue, which shiftLogsOfRQ numbered below 1 in
// the order they were logged (seq alone), then the current round's, by
// attempt, then seq. A follower's cursor in the current round is thus
// after every earlier round's line, and the new round's attempt 1 comes
// after the earlier rounds' attempt 2 (ordered by attempt alone, a
// follower past attempt 2 skipped it: a trial found it). logKey is a
// line's place in it, logCursor a cursor's ($3 attempt, $4 seq).
const (
	logKey    = `(l.seq > 0, CASE WHEN l.seq > 0 THEN l.attempt ELSE 0 END, l.seq)`
	logCursor = `($4::int > 0, CASE WHEN $4::int > 0 THEN $3::int ELSE 0 END, $4::int)`
	logOrder  = `l.seq > 0, CASE WHEN l.seq > 0 THEN l.attempt ELSE 0 END, l.seq`
)

// qTaskLogs reads a page of a task run's log in order (logOrder): the
// primary key finds the task run's lines, a sort of them orders them
// (an attempt's lines are bounded by --task-log-max-bytes).
const qTaskLogs = `
SELECT task_run_id, attempt, seq, logged_at, stream, coalesce(level, '') AS level, line
  FROM task_logs l
 WHERE l.task_run_id = $1 AND ($2::int = 0 OR l.attempt = $2::int)
   AND (($3::int = 0 AND $4::int = 0) OR ` + logKey + ` > ` + logCursor + `)
 ORDER BY ` + logOrder + `
 LIMIT $5`

// TaskLogs returns a page of the log of q.TaskRunID (see TaskLogQuery),
// oldest first; fewer lines than the limit means none more are stored
// now. A task run with no lines (or none at all) gives an empty page:
// the caller checks the task run exists (TaskShow). Errors: a negative
// Attempt or Limit (nothing read), or the database's.
func (s *Store) TaskLogs(ctx context.Context, q TaskLogQuery) ([]TaskLogLine, error) {
	if q.Attempt < 0 || q.Limit < 0 {
		return nil, fmt.Errorf("task logs: attempt %d and limit %d must not be negative", q.Attempt, q.Limit)
	}
	limit := q.Limit
	if limit == 0 {
		limit = TaskLogPageDefault
	}
	var out []TaskLogLine
	if err := s.db.SelectContext(ctx, &out, qTaskLogs, s.args(q.TaskRunID, q.Attempt, q.AfterAttempt, q.AfterSeq, limit)...); err != nil {
		return nil, fmt.Errorf("task logs of %s: %w", q.TaskRunID, err)
	}
	return out, nil
}

// qTaskLogTail reads the last $2 lines of a task run's log (logOrder),
// newest first.
const qTaskLogTail = `
SELECT task_run_id, attempt, seq, logged_at, stream, coalesce(level, '') AS level, line
  FROM task_logs l WHERE l.task_run_id = $1
 ORDER BY l.seq > 0 DESC, CASE WHEN l.seq > 0 THEN l.attempt ELSE 0 END DESC, l.seq DESC
 LIMIT $2`

// TaskLogTail returns the last n (at least 1) lines of the log of task
// run id, oldest first (the dashboard's task view). Errors: the
// database's.
func (s *Store) TaskLogTail(ctx context.Context, id uuid.UUID, n int) ([]TaskLogLine, error) {
	var out []TaskLogLine
	if err := s.db.SelectContext(ctx, &out, qTaskLogTail, s.args(id, max(n, 1))...); err != nil {
		return nil, fmt.Errorf("task log tail of %s: %w", id, err)
	}
	slices.Reverse(out)
	return out, nil
}

// deleteCandRows and deleteCandRowsUnlessDry are the data-modifying CTEs
// of the prune and delete statements (qPruneRuns, qDeleteRuns) that delete
// what belongs to the runs in their CTE cand but has no foreign key to
// them: the log lines of their task runs (task_logs, through its primary
// key) and their unpublished transition stream rows (a scan of the
// backlog: migration 26 dropped the run_id index, a published row is
// deleted at once) and seq counters (transition_stream_seqs, through its
// primary key). The second deletes
// nothing when $4 is true (qDeleteRuns' dry run).
const (
	deleteCandRows = `logs AS (` + deleteCandLogs + `
), stream AS (` + deleteCandStream + `
), stream_seqs AS (` + deleteCandSeqs + `
)`
	deleteCandRowsUnlessDry = `logs AS (` + deleteCandLogs + ` AND NOT $4::bool
), stream AS (` + deleteCandStream + ` AND NOT $4::bool
), stream_seqs AS (` + deleteCandSeqs + ` AND NOT $4::bool
)`
	deleteCandLogs = `
    DELETE FROM task_logs l
     WHERE l.task_run_id = ANY (ARRAY (SELECT t.id FROM task_runs t WHERE t.run_id = ANY (ARRAY (SELECT id FROM cand))))`
	deleteCandStream = `
    DELETE FROM transition_stream s WHERE s.run_id = ANY (ARRAY (SELECT id FROM cand))`
	deleteCandSeqs = `
    DELETE FROM transition_stream_seqs q WHERE q.run_id = ANY (ARRAY (SELECT id FROM cand))`
)
