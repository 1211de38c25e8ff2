package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// The transition stream (migration 23): PostgreSQL triggers write a row of
// transition_stream for every run and task transition in the transaction
// that makes it, while transition_stream_setting holds its one row (the
// stream is on). The publisher numbers the rows (AssignStreamSeqs),
// publishes them (LockStream) and deletes each one the broker confirmed
// (DeletePublished, migration 26): the table holds only the backlog. The
// prune and delete of runs take a run's rows with it.

// ErrStreamOff is returned by StreamSetting when the stream is off (no
// setting row).
var ErrStreamOff = errors.New("the transition stream is off (start a publisher with --events-exchange NAME)")

// StreamSetting is the stream's setting row: the exchange it is published
// to, since when and by whom it is on.
type StreamSetting struct {
	Exchange  string    `db:"exchange" json:"exchange"`
	EnabledAt time.Time `db:"enabled_at" json:"enabled_at"`
	EnabledBy string    `db:"enabled_by" json:"enabled_by"`
}

// EnableStream turns the stream on with exchange (upserting the setting
// row, actor recorded as enabled_by): from the commit on, every
// transition writes a stream row. Errors: an empty exchange, or the
// database's.
func (s *Store) EnableStream(ctx context.Context, exchange, actor string) error {
	if exchange == "" {
		return errors.New("enable transition stream: empty exchange name")
	}
	_, err := s.db.ExecContext(ctx, `
INSERT INTO transition_stream_setting (exchange, enabled_by) VALUES ($1, $2)
ON CONFLICT (one_row) DO UPDATE SET exchange = excluded.exchange, enabled_by = excluded.enabled_by,
       enabled_at = CASE WHEN transition_stream_setting.exchange = excluded.exchange THEN transition_stream_setting.enabled_at ELSE now() END`, exchange, actor)
	if err != nil {
		return fmt.Errorf("enable transition stream: %w", err)
	}
	return nil
}

// DisableStream turns the stream off (deletes the setting row): from the
// commit on no transition writes a stream row; rows already written are
// still published. It reports whether the stream was on. Errors: the
// database's.
func (s *Store) DisableStream(ctx context.Context) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM transition_stream_setting`)
	if err != nil {
		return false, fmt.Errorf("disable transition stream: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("disable transition stream: %w", err)
	}
	return n > 0, nil
}

// StreamSetting reads the setting row. Errors: ErrStreamOff when the
// stream is off, or the database's.
func (s *Store) StreamSetting(ctx context.Context) (StreamSetting, error) {
	var st StreamSetting
	err := s.db.GetContext(ctx, &st, `SELECT exchange, enabled_at, enabled_by FROM transition_stream_setting`)
	if errors.Is(err, sql.ErrNoRows) {
		return StreamSetting{}, ErrStreamOff
	}
	if err != nil {
		return StreamSetting{}, fmt.Errorf("read transition stream setting: %w", err)
	}
	return st, nil
}

// streamSeqLock is the transaction-level advisory lock every assigner of
// stream seqs holds (AssignStreamSeqs). The same statement turns sequential
// scans off for the rest of the transaction (streamIndexScans says why).
const streamSeqLock = `SELECT pg_advisory_xact_lock(hashtext('flowforge.transition_stream.seq')), ` + streamIndexScans

// streamIndexScans turns sequential scans off for the rest of the
// transaction (set_config's is_local): the scans that find the next stream
// rows (qStreamUnnumbered, qLockStream) must walk the primary key in id
// order and stop at their LIMIT. transition_stream is a queue: its
// statistics are those of whatever backlog the last analyze saw (often a
// handful of rows), and on them PostgreSQL plans a sequential scan and a
// sort of every row, a cost that grows with the backlog — under W2's load
// the backlog grew to thousands of rows, each cycle sorting all of them
// (7 to 35 ms a scan), and the stream fell further behind (issue 28's
// overhead). With sequential scans off the only plan left is the primary
// key's, which reads the batch and the dead entries before it.
const streamIndexScans = `set_config('enable_seqscan', 'off', true)`

// AssignStreamSeqs numbers up to limit unnumbered stream rows, oldest id
// first: each run's rows get the run's next numbers in id order, after
// the last one it was given (transition_stream_seqs, which outlives the
// deletion of published rows). It runs in one transaction that first takes
// the assigners' advisory lock (streamSeqLock), and returns how many rows
// it numbered. Numbers are committed before any row is published, so a row
// published again after a crash carries the same seq and event id. Errors:
// a limit below 1, or the database's.
//
// Why id order keeps each task's (and run's) transitions in commit order:
// a task's transitions are made by statements that update its task_runs
// row, so the second waits for the first's commit on the row lock, and
// its stream row (written by a trigger of the same statement, after the
// update) takes its id from the sequence after that commit. So for one
// task, a larger id means a later commit, and the row of the earlier
// transition is committed, hence visible, whenever the later one is. The
// run's rows likewise, under the workflow_runs row lock. Rows of different
// tasks may commit out of id order; numbering the committed ones first is
// harmless (each task's order is kept) and keeps seq gap-free: every
// number is given once, under the lock.
//
// The rows are read in a statement of their own after streamSeqLock: in
// READ COMMITTED each statement takes its snapshot when it starts, so the
// read sees every number the previous holder of the lock committed. The
// lock also keeps two assigners from bumping the same runs' counters in
// different orders (a deadlock) or interleaving their numbers out of id
// order. Only assigners lock transition_stream_seqs rows, and writers
// never wait for a stream row, so the lock costs the writers nothing.
//
// The numbering is computed here rather than in one statement of window
// functions and joins: PostgreSQL's estimates for a table that holds only
// a backlog are a row or two, and the joins it planned on them compared
// every row with every other (about 11 ms of a 13 ms statement for 150
// rows, issue 28's overhead).
func (s *Store) AssignStreamSeqs(ctx context.Context, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("assign stream seqs: limit %d is below 1", limit)
	}
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, streamSeqLock); err != nil {
			return fmt.Errorf("take the assigners' lock: %w", err)
		}
		var rows []unnumberedRow
		if err := tx.SelectContext(ctx, &rows, qStreamUnnumbered, limit); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		p := planStreamSeqs(rows)
		last := make(map[string]int64, len(p.runs))
		bumped, err := tx.QueryxContext(ctx, qBumpStreamSeqs, p.runs, p.counts)
		if err != nil {
			return err
		}
		defer bumped.Close()
		for bumped.Next() {
			var run string
			var seq int64
			if err := bumped.Scan(&run, &seq); err != nil {
				return err
			}
			last[run] = seq
		}
		if err := bumped.Err(); err != nil {
			return err
		}
		ids, seqs := p.seqs(last)
		res, err := tx.ExecContext(ctx, qSetStreamSeqs, ids, seqs)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("assign stream seqs: %w", err)
	}
	return n, nil
}

// qStreamUnnumbered reads up to $1 unnumbered rows, oldest id first; run
// after streamSeqLock (which turns sequential scans off).
const qStreamUnnumbered = `
SELECT id, run_id::text FROM transition_stream
 WHERE published_at IS NULL AND seq IS NULL
 ORDER BY id
 LIMIT $1`

// qBumpStreamSeqs adds to each run ($1) its count of new rows ($2), in
// run order, and returns each run's new last number.
const qBumpStreamSeqs = `
INSERT INTO transition_stream_seqs (run_id, last_seq)
SELECT r, n FROM unnest($1::uuid[], $2::bigint[]) AS x(r, n)
 ORDER BY r
ON CONFLICT (run_id) DO UPDATE SET last_seq = transition_stream_seqs.last_seq + excluded.last_seq
RETURNING run_id::text, last_seq`

// qSetStreamSeqs gives each row ($1) its number ($2).
const qSetStreamSeqs = `
UPDATE transition_stream t SET seq = x.seq
  FROM unnest($1::bigint[], $2::bigint[]) AS x(id, seq)
 WHERE t.id = x.id`

// unnumberedRow is a row qStreamUnnumbered read.
type unnumberedRow struct {
	ID    int64  `db:"id"`
	RunID string `db:"run_id"`
}

// streamSeqPlan is one assignment's arithmetic: rows in id order, each
// one's rank among its run's rows (1, 2, ...), and each run's count.
type streamSeqPlan struct {
	rows   []unnumberedRow
	rank   []int64
	runs   []string
	counts []int64
	count  map[string]int64
}

// planStreamSeqs ranks rows (in id order, as read) within their runs.
func planStreamSeqs(rows []unnumberedRow) streamSeqPlan {
	p := streamSeqPlan{rows: rows, rank: make([]int64, len(rows)), count: map[string]int64{}}
	for i, r := range rows {
		if p.count[r.RunID] == 0 {
			p.runs = append(p.runs, r.RunID)
		}
		p.count[r.RunID]++
		p.rank[i] = p.count[r.RunID]
	}
	for _, run := range p.runs {
		p.counts = append(p.counts, p.count[run])
	}
	return p
}

// seqs returns each row's id and number, given each run's new last
// number: the run's k-th row of n gets last - n + k.
func (p streamSeqPlan) seqs(last map[string]int64) (ids, seqs []int64) {
	ids, seqs = make([]int64, len(p.rows)), make([]int64, len(p.rows))
	for i, r := range p.rows {
		ids[i] = r.ID
		seqs[i] = last[r.RunID] - p.count[r.RunID] + p.rank[i]
	}
	return ids, seqs
}

// StreamRow is one numbered, unpublished row of the transition stream.
type StreamRow struct {
	ID       int64 `db:"id"`
	Attempts int   `db:"publish_attempts"`
	Event    core.TransitionEvent
}

// streamRowScan is a StreamRow as the query returns it.
type streamRowScan struct {
	ID        int64          `db:"id"`
	Attempts  int            `db:"publish_attempts"`
	EventID   string         `db:"event_id"`
	Seq       int64          `db:"seq"`
	RunID     string         `db:"run_id"`
	Workflow  string         `db:"workflow"`
	Kind      string         `db:"kind"`
	Task      sql.NullString `db:"task"`
	TaskRunID sql.NullString `db:"task_run_id"`
	From      sql.NullString `db:"from_state"`
	To        string         `db:"to_state"`
	Attempt   int            `db:"attempt"`
	At        time.Time      `db:"at"`
	Actor     sql.NullString `db:"actor"`
	Reason    sql.NullString `db:"reason"`
}

func (r streamRowScan) row() StreamRow {
	return StreamRow{ID: r.ID, Attempts: r.Attempts, Event: core.TransitionEvent{
		EventID: r.EventID, Seq: r.Seq, RunID: r.RunID, Workflow: r.Workflow, Kind: r.Kind,
		Task: r.Task.String, TaskRunID: r.TaskRunID.String, From: r.From.String, To: r.To,
		Attempt: r.Attempt, At: r.At.UTC(), Actor: r.Actor.String, Reason: r.Reason.String,
	}}
}

// streamPublishLock takes, without waiting, the transaction-level
// advisory lock of the stream's publishing (LockStream), and turns
// sequential scans off for the rest of the transaction (streamIndexScans).
// One publisher at a time publishes the stream: its batch is every
// numbered row, oldest first, so a run's rows reach the broker in seq
// order whichever publisher runs. It replaces a FOR UPDATE of each row,
// which wrote a WAL record per row published (issue 28's overhead: five
// a W2 run). The rows need no lock of their own: the only
// other writers of numbered rows are the deletion of a run (a row deleted
// while it is published is published all the same, and its DELETE here
// finds nothing) and the prune of rows an older publisher stamped, which
// this one never reads. A publisher older than this lock (a rolling
// upgrade) still locks rows instead, so the two may publish a row twice
// meanwhile, which consumers de-duplicate by event id.
const streamPublishLock = `SELECT pg_try_advisory_xact_lock(hashtext('flowforge.transition_stream.publish')), ` + streamIndexScans

// qLockStream reads up to $1 numbered, unpublished rows, oldest first;
// run after streamPublishLock, by its holder.
const qLockStream = `
SELECT id, publish_attempts, event_id::text, seq, run_id::text, workflow, kind, task, task_run_id::text,
       from_state, to_state, attempt, at, actor, reason
  FROM transition_stream
 WHERE published_at IS NULL AND seq IS NOT NULL
 ORDER BY id
 LIMIT $1`

// StreamBatch is a batch of stream rows held by the one publisher's
// transaction that publishes the stream, as OutboxBatch is for
// dispatches: publish the rows, mark what the broker confirmed, commit.
// Until the commit nothing is deleted, so a crash leaves every row to
// publish again (with its seq and event id).
type StreamBatch struct {
	heldTx
	Rows []StreamRow
}

// LockStream begins a transaction, takes the stream's publishing lock
// (streamPublishLock) and reads up to limit numbered, unpublished stream
// rows (qLockStream, over the primary key: streamIndexScans). While
// another publisher's batch holds the lock it returns an empty batch at
// once (that publisher publishes the rows). The transaction outlives ctx
// (see OutboxBatch) and ends only with Commit or Rollback, which the
// caller must call. Errors: the pool or the query failed, or ctx ended
// first.
func (s *Store) LockStream(ctx context.Context, limit int) (*StreamBatch, error) {
	h, err := s.beginHeld(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock stream: %w", err)
	}
	var mine bool
	var setting string
	if err := h.tx.QueryRowContext(ctx, streamPublishLock).Scan(&mine, &setting); err != nil {
		_ = h.Rollback()
		return nil, fmt.Errorf("lock stream: %w", err)
	}
	if !mine {
		return &StreamBatch{heldTx: *h}, nil
	}
	var rows []streamRowScan
	if err := h.tx.SelectContext(ctx, &rows, qLockStream, limit); err != nil {
		_ = h.Rollback()
		return nil, fmt.Errorf("lock stream: %w", err)
	}
	b := &StreamBatch{heldTx: *h}
	for _, r := range rows {
		b.Rows = append(b.Rows, r.row())
	}
	return b, nil
}

// DeletePublished deletes the rows the broker confirmed: the stream keeps
// only what is still to publish (migration 26). Until the batch commits a
// crash leaves them to publish again, with the same seq and event id.
func (b *StreamBatch) DeletePublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, `DELETE FROM transition_stream WHERE id = ANY ($1::bigint[])`, ids)
	if err != nil {
		return fmt.Errorf("delete published stream rows: %w", err)
	}
	return nil
}

// MarkFailed leaves the rows unpublished, counting the attempt and
// recording why.
func (b *StreamBatch) MarkFailed(ctx context.Context, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, `UPDATE transition_stream SET publish_attempts = publish_attempts + 1, last_error = $2 WHERE id = ANY ($1::bigint[]) AND published_at IS NULL`, ids, reason)
	if err != nil {
		return fmt.Errorf("record failed stream publishes: %w", err)
	}
	return nil
}

// qVacuumStream is VacuumStream's statement.
const qVacuumStream = `VACUUM (SKIP_LOCKED, TRUNCATE false) transition_stream`

// VacuumStream vacuums transition_stream, skipping it when another
// vacuum holds it. The table holds only the backlog, but every published
// row leaves a dead tuple behind, and autovacuum visits a database at most
// once per autovacuum_naptime (a minute by default): at a few thousand
// transitions a second the scans that find the next rows (AssignStreamSeqs,
// LockStream) would walk hundreds of thousands of dead tuples by then. The
// publisher calls it every few seconds while it deletes rows. A role that
// does not own the table gets PostgreSQL's warning and nothing is done (no
// error): autovacuum alone keeps it then.
//
// It never truncates the table (TRUNCATE false, PostgreSQL 12 and later):
// the backlog's pages are emptied and refilled all day, so VACUUM would
// try to give the empty tail back to the operating system each time, and
// that needs an ACCESS EXCLUSIVE lock. VACUUM asks for it without waiting,
// again and again for up to five seconds while transitions hold the table
// (every one inserts into it), stalling the stream loop that long; when it
// gets it, every transition of every run waits behind it while it scans
// the tail (issue 28's overhead: 120 ms to 5 s a vacuum under W2, against
// 5 ms without). The free pages are reused by the next inserts instead.
// Errors: the database's.
func (s *Store) VacuumStream(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, qVacuumStream); err != nil {
		return fmt.Errorf("vacuum transition stream: %w", err)
	}
	return nil
}

// StreamStatus summarises the unpublished stream rows.
type StreamStatus struct {
	// Pending counts rows not yet published (numbered or not).
	Pending int64 `db:"pending" json:"pending"`
	// OldestPendingSeconds is the age of the oldest unpublished row on the
	// database clock, 0 when none is.
	OldestPendingSeconds float64 `db:"oldest_pending_seconds" json:"oldest_pending_seconds"`
}

// StreamStatus reads the stream's backlog (every row not yet published).
// Errors: the database's.
func (s *Store) StreamStatus(ctx context.Context) (StreamStatus, error) {
	var st StreamStatus
	err := s.db.GetContext(ctx, &st, `
SELECT (SELECT count(*) FROM transition_stream WHERE published_at IS NULL) AS pending,
       coalesce((SELECT extract(epoch FROM now() - at)::float8 FROM transition_stream WHERE published_at IS NULL ORDER BY id LIMIT 1), 0) AS oldest_pending_seconds`)
	if err != nil {
		return StreamStatus{}, fmt.Errorf("transition stream status: %w", err)
	}
	return st, nil
}

// qPruneStream deletes up to $2 stream rows published more than $1 ms ago
// (database clock), oldest first, over transition_stream_published_at,
// skipping rows another transaction holds. Only a publisher older than
// migration 26 leaves such rows (a rolling upgrade): this one deletes a row
// when the broker confirms it.
const qPruneStream = `
DELETE FROM transition_stream WHERE id IN (
    SELECT id FROM transition_stream
     WHERE published_at IS NOT NULL AND published_at < now() - $1::bigint * interval '1 millisecond'
     ORDER BY published_at LIMIT $2 FOR UPDATE SKIP LOCKED)`

// PruneStream deletes one batch of at most limit (0: PruneBatchDefault)
// stream rows stamped published (by an older publisher) longer than age
// ago, in one short transaction,
// and returns how many it deleted. Unpublished rows are never deleted
// (they go only with their run). Errors: ErrBadPrune for a negative age or
// limit, or the database's.
func (s *Store) PruneStream(ctx context.Context, age time.Duration, limit int) (int64, error) {
	n, err := s.pruneBatch(ctx, qPruneStream, age, limit)
	if err != nil {
		return 0, fmt.Errorf("prune transition stream: %w", err)
	}
	return n, nil
}
