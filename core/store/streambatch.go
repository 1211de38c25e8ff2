package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/flowforge/flowforge/core"
)

// Numbering and publishing the transition stream: one transaction of the
// one publisher at a time (LockStream) reads a batch of unpublished rows,
// numbers them, and once the broker has confirmed them deletes them and
// records the numbers given (StreamBatch.Commit).
//
// A row's seq is its run's sequence number (1, 2, 3 ... per run, no gap).
// It is computed in the publishing transaction, not stored: a run's
// unnumbered rows get the run's next numbers in id order, after the last
// one it was given (transition_stream_seqs, which outlives the deletion of
// published rows). Until that transaction commits nothing is recorded, so
// a crash before the commit leaves the rows to be numbered again, and they
// must get the same numbers: the next batch must see the same rows, in the
// same order, before them. Rows of different tasks commit out of id order
// (a transaction may take an id and commit after a later id's), so the
// rows visible now are not always a prefix of the ids. The stream mark
// (StreamMark) makes them one: only rows up to an id below which no
// transaction can still commit a row are numbered. Such a prefix never
// changes, so the numbers computed from it do not either.
//
// Why id order keeps each task's (and run's) transitions in commit order:
// a task's transitions are made by statements that update its task_runs
// row, so the second waits for the first's commit on the row lock, and
// its stream row (written by a trigger of the same statement, after the
// update) takes its id from the sequence after that commit. So for one
// task a larger id means a later commit. The run's rows likewise, under
// the workflow_runs row lock.

// StreamMark is the stream's watermark between two publishing batches:
// Settled is an id at or below which every row that will ever exist is
// committed (or rolled back), the prefix a batch may number. A mark is
// taken in each batch (upto, the highest id the sequence had handed out,
// then the transactions then writing to the table) and settles in a later
// batch that finds all of those transactions ended: every id up to upto
// was taken by a transaction holding the table's ROW EXCLUSIVE lock (a
// trigger's INSERT takes it before it calls nextval, and keeps it to the
// end of its transaction), so once they have ended no row at or below upto
// can still appear; a mark taken with no writer is settled at once (the
// usual case on a quiet system). A mark still pending after
// streamMarkPatience (a writer stays open) makes LockStream number the
// rows visible past it the way a crash cannot change, by storing their
// numbers first (AssignStreamSeqs). The zero mark settles nothing: the
// first batch of a publisher publishes only rows numbered before (an
// older publisher's, or rows whose publish failed) and takes the first
// mark. Pass each batch's Mark to the next LockStream; a mark lost with
// its publisher only delays the stream by a batch.
type StreamMark struct {
	// Settled is the highest id known settled (0: none).
	Settled int64
	// upto is the pending mark's id (0: none pending).
	upto int64
	// writers are the virtual transaction ids (pg_locks'
	// virtualtransaction) that held transition_stream's ROW EXCLUSIVE lock
	// when the pending mark was taken, at takenAt (the database's clock).
	writers []string
	takenAt time.Time
}

// Pending says the mark waits for writers: ids above Settled were handed
// out when it was taken, and transactions then writing stream rows may
// still commit rows with them, for a later batch to publish.
func (m StreamMark) Pending() bool { return m.upto > m.Settled }

// streamMarkPatience is how long a mark may wait for its writers before
// LockStream stores the numbers of the rows visible past it
// (AssignStreamSeqs): a transaction that wrote a transition and stays open
// (an application's transaction around a TriggerTx, a session idle in
// transaction) would otherwise hold back every later transition of every
// run until it ends.
const streamMarkPatience = time.Second

// streamLocks takes, without waiting, the transaction-level advisory lock
// of the stream's publishing and turns sequential scans off for the rest
// of the transaction (streamIndexScans). One publisher at a time publishes
// the stream: its batch is every unpublished row up to the settled mark,
// oldest first, so a run's rows reach the broker in seq order whichever
// publisher runs. It replaces a FOR UPDATE of each row, which wrote a WAL
// record per row published (issue 28's overhead). The rows need no lock of
// their own: the only other writers of unpublished rows are the deletion
// of a run (a row deleted while it is published is published all the same,
// and its DELETE here finds nothing) and, during a rolling upgrade, a
// publisher older than migration 29's change that numbers rows in a
// transaction of its own under the assigners' lock (streamSeqLock), which
// the holder of this lock takes too.
const streamPublishLock = `SELECT pg_try_advisory_xact_lock(hashtext('flowforge.transition_stream.publish')), ` + streamIndexScans +
	`, coalesce((SELECT exchange FROM transition_stream_setting), (SELECT exchange FROM transition_stream_drain), '')`

// streamSeqLock is the transaction-level advisory lock every assigner of
// stream seqs holds until it commits: this publisher's batch, and an older
// publisher's numbering transaction (rolling upgrade), so the two never
// give a run's numbers at once.
const streamSeqLock = `SELECT pg_advisory_xact_lock(hashtext('flowforge.transition_stream.seq'))`

// streamIndexScans turns sequential scans off for the rest of the
// transaction (set_config's is_local): the scan that finds the next
// stream rows (qLockStream) must walk the primary key in id order and stop
// at its LIMIT. transition_stream is a queue: its statistics are those of
// whatever backlog the last analyze saw (often a handful of rows), and on
// them PostgreSQL plans a sequential scan and a sort of every row, a cost
// that grows with the backlog — under W2's load the backlog grew to
// thousands of rows, each cycle sorting all of them (7 to 35 ms a scan),
// and the stream fell further behind (issue 28's overhead). With
// sequential scans off the only plan left is the primary key's, which
// reads the batch and the dead entries before it.
const streamIndexScans = `set_config('enable_seqscan', 'off', true)`

// qStreamMarkSettled takes the assigners' lock, says whether the pending
// mark's writers ($1) have all ended and whether the mark (taken at $2)
// has been pending for longer than $3 ms, and reads the highest id the
// stream's sequence has handed out (the next mark's upto; last_value is
// not handed out until is_called). The sequence must not cache values per
// session (CACHE 1, bigserial's default): a cached id is handed out
// without the sequence, later than this read.
const qStreamMarkSettled = streamSeqLock + `,
       NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'relation' AND relation = 'transition_stream'::regclass
                      AND virtualtransaction = ANY ($1::text[])),
       coalesce(clock_timestamp() - $2::timestamptz > $3::bigint * interval '1 millisecond', false),
       (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM transition_stream_id_seq)`

// qStreamWriters lists the transactions (virtual transaction ids,
// comma-separated) of this database, other than this one, holding transition_stream's ROW EXCLUSIVE lock (a trigger's insert
// takes it before its nextval): the new mark's writers. It runs after
// qStreamMarkSettled, so every id at or below that statement's upto was
// taken by one of these or by a transaction that has ended.
const qStreamWriters = `
SELECT coalesce(string_agg(DISTINCT virtualtransaction, ','), ''), clock_timestamp() FROM pg_locks
 WHERE locktype = 'relation' AND relation = 'transition_stream'::regclass AND mode = 'RowExclusiveLock'
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND pid IS DISTINCT FROM pg_backend_pid()`

// qLockStream reads up to $1 unpublished rows, oldest first: those
// numbered before (by an older publisher, or kept after a failed publish)
// and those at or below the settled mark ($2); run after streamPublishLock,
// by its holder.
const qLockStream = `
SELECT id, publish_attempts, event_id::text, seq, run_id::text, workflow, kind, task, task_run_id::text,
       from_state, to_state, attempt, at, actor, reason
  FROM transition_stream
 WHERE published_at IS NULL AND (seq IS NOT NULL OR id <= $2)
 ORDER BY id
 LIMIT $1`

// qStreamSeqs reads the last number given to each run ($1).
const qStreamSeqs = `SELECT run_id::text, last_seq FROM transition_stream_seqs WHERE run_id = ANY ($1::uuid[])`

// qSetStreamSeqCounters records each run's ($1) last number given ($2).
const qSetStreamSeqCounters = `
INSERT INTO transition_stream_seqs (run_id, last_seq)
SELECT r, n FROM unnest($1::uuid[], $2::bigint[]) AS x(r, n)
 ORDER BY r
ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq`

// qKeepStreamSeqs stores the numbers ($2) of rows ($1) a batch numbered
// and neither deleted nor marked failed: the next batch publishes them
// with the same numbers.
const qKeepStreamSeqs = `
UPDATE transition_stream t SET seq = x.seq
  FROM unnest($1::bigint[], $2::bigint[]) AS x(id, seq)
 WHERE t.id = x.id AND t.seq IS NULL`

// StreamRow is one unpublished row of the transition stream, numbered.
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
	Seq       sql.NullInt64  `db:"seq"`
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
		EventID: r.EventID, Seq: r.Seq.Int64, RunID: r.RunID, Workflow: r.Workflow, Kind: r.Kind,
		Task: r.Task.String, TaskRunID: r.TaskRunID.String, From: r.From.String, To: r.To,
		Attempt: r.Attempt, At: r.At.UTC(), Actor: r.Actor.String, Reason: r.Reason.String,
	}}
}

// StreamBatch is a batch of stream rows held by the one publisher's
// transaction that publishes the stream, as OutboxBatch is for
// dispatches: publish the rows, delete what the broker confirmed, mark
// what it did not, Commit. Until the commit nothing is recorded, so a
// crash leaves every row to number and publish again, with the same seq
// and event id.
type StreamBatch struct {
	heldTx
	// Rows are the batch's rows in id order, each Event with its seq.
	Rows []StreamRow
	// Mark is the mark to pass to the next LockStream.
	Mark StreamMark
	// Exchange is the exchange the database's setting names, read in the
	// batch's transaction under the publishing lock (with the stream off,
	// the drain's, where the rows left go: DisableStream; "" with neither):
	// a publisher publishes the batch only there, so a change of
	// exchange moves the stream between two batches, never within one,
	// and no publisher still following the old setting sends a later
	// batch to the old exchange.
	Exchange string
	// fresh are the indexes in Rows of the rows this batch numbered;
	// last is each of their runs' last number after the batch.
	fresh []int
	last  map[string]int64
	// done are the rows deleted or marked failed.
	done map[int64]bool
}

// LockStream begins a transaction, takes the stream's publishing lock
// without waiting (streamPublishLock) and then the assigners' (waiting
// for an older publisher's numbering), settles mark if it can (StreamMark;
// one pending for longer than streamMarkPatience makes it store the
// numbers of the visible rows first, AssignStreamSeqs) and takes the next
// one, and reads up to limit unpublished rows (over the
// primary key: streamIndexScans), numbering those not numbered yet. While
// another publisher's batch holds the lock it returns an empty batch at
// once (that publisher publishes the rows), with mark as its Mark. The
// transaction outlives ctx (see OutboxBatch) and ends only with Commit or
// Rollback, which the caller must call. Errors: a limit below 1, the pool
// or a query failed, or ctx ended first.
func (s *Store) LockStream(ctx context.Context, limit int, mark StreamMark) (*StreamBatch, error) {
	if limit < 1 {
		return nil, fmt.Errorf("lock stream: limit %d is below 1", limit)
	}
	b, stalled, err := s.lockStream(ctx, limit, mark, true)
	if err != nil || !stalled {
		return b, err
	}
	_ = b.Rollback()
	if _, err := s.AssignStreamSeqs(ctx, limit); err != nil {
		return nil, fmt.Errorf("lock stream: a stalled mark's fallback: %w", err)
	}
	b, _, err = s.lockStream(ctx, limit, mark, false)
	return b, err
}

// lockStream is LockStream's transaction: with fallback it stops early
// and reports a stalled mark (pending past streamMarkPatience) instead.
func (s *Store) lockStream(ctx context.Context, limit int, mark StreamMark, fallback bool) (*StreamBatch, bool, error) {
	h, err := s.beginHeld(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("lock stream: %w", err)
	}
	b := &StreamBatch{heldTx: *h, Mark: mark}
	stalled, err := b.lock(ctx, limit, fallback)
	if err != nil {
		_ = b.Rollback()
		return nil, false, fmt.Errorf("lock stream: %w", err)
	}
	return b, stalled, nil
}

// lock is LockStream's work in the batch's transaction; with fallback it
// returns stalled (and reads nothing) for a mark pending past
// streamMarkPatience.
func (b *StreamBatch) lock(ctx context.Context, limit int, fallback bool) (stalled bool, err error) {
	var mine bool
	var setting string
	if err := b.tx.QueryRowContext(ctx, streamPublishLock).Scan(&mine, &setting, &b.Exchange); err != nil {
		return false, err
	}
	if !mine {
		return false, nil
	}
	var lock any
	var settled bool
	var upto int64
	var takenAt *time.Time
	if b.Mark.upto != 0 {
		takenAt = &b.Mark.takenAt
	}
	if err := b.tx.QueryRowContext(ctx, qStreamMarkSettled, b.Mark.writers, takenAt, streamMarkPatience.Milliseconds()).Scan(&lock, &settled, &stalled, &upto); err != nil {
		return false, err
	}
	if !settled && stalled && fallback {
		return true, nil
	}
	if settled || b.Mark.upto == 0 {
		if b.Mark.upto > b.Mark.Settled {
			b.Mark.Settled = b.Mark.upto
		}
		var writers string
		var at time.Time
		if err := b.tx.QueryRowContext(ctx, qStreamWriters).Scan(&writers, &at); err != nil {
			return false, err
		}
		b.Mark.upto, b.Mark.writers, b.Mark.takenAt = upto, nil, at
		if writers != "" {
			b.Mark.writers = strings.Split(writers, ",")
		} else if upto > b.Mark.Settled {
			b.Mark.Settled, b.Mark.upto = upto, 0 // no writer: settled already
		}
	}
	var rows []streamRowScan
	if err := b.tx.SelectContext(ctx, &rows, qLockStream, limit, b.Mark.Settled); err != nil {
		return false, err
	}
	for _, r := range rows {
		b.Rows = append(b.Rows, r.row())
	}
	return false, b.number(ctx, rows)
}

// number gives the batch's unnumbered rows their runs' next numbers in id
// order (the rows are read in id order), after the last ones given.
func (b *StreamBatch) number(ctx context.Context, rows []streamRowScan) error {
	var runs []string
	b.last = map[string]int64{}
	for i, r := range rows {
		if r.Seq.Valid {
			continue
		}
		if _, ok := b.last[r.RunID]; !ok {
			b.last[r.RunID] = 0
			runs = append(runs, r.RunID)
		}
		b.fresh = append(b.fresh, i)
	}
	if len(runs) == 0 {
		return nil
	}
	if err := readRunSeqs(ctx, b.tx, b.last, qStreamSeqs, runs); err != nil {
		return err
	}
	for _, i := range b.fresh {
		run := b.Rows[i].Event.RunID
		b.last[run]++
		b.Rows[i].Event.Seq = b.last[run]
	}
	return nil
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
	b.markDone(ids)
	return nil
}

// MarkFailed leaves the rows unpublished, counting the attempt,
// recording why, and keeping the seq each was published with (a row this
// batch numbered is numbered for good then: the next batch publishes it
// with the same seq). One UPDATE of each row, so that it stays a HOT
// update beside its row (migration 28).
func (b *StreamBatch) MarkFailed(ctx context.Context, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	given := make(map[int64]int64, len(b.Rows))
	for _, r := range b.Rows {
		given[r.ID] = r.Event.Seq
	}
	seqs := make([]int64, len(ids))
	for i, id := range ids {
		seqs[i] = given[id]
	}
	_, err := b.tx.ExecContext(ctx, `
UPDATE transition_stream t SET publish_attempts = publish_attempts + 1, last_error = $3, seq = coalesce(t.seq, x.seq)
  FROM unnest($1::bigint[], $2::bigint[]) AS x(id, seq)
 WHERE t.id = x.id AND t.published_at IS NULL`, ids, seqs, reason)
	if err != nil {
		return fmt.Errorf("record failed stream publishes: %w", err)
	}
	b.markDone(ids)
	return nil
}

// markDone records rows whose seq no longer needs recording at Commit
// (deleted, or kept by MarkFailed).
func (b *StreamBatch) markDone(ids []int64) {
	if b.done == nil {
		b.done = map[int64]bool{}
	}
	for _, id := range ids {
		b.done[id] = true
	}
}

// Commit records the numbers the batch gave (each run's last one, and the
// seq of each numbered row it neither deleted nor marked failed), commits, and returns the
// connection to the pool. Errors: a statement's or the commit's (nothing
// is recorded then, and the rows are numbered again, the same way, by the
// next batch).
func (b *StreamBatch) Commit(ctx context.Context) error {
	if err := b.recordSeqs(ctx); err != nil {
		_ = b.Rollback()
		return fmt.Errorf("commit stream batch: %w", err)
	}
	return b.heldTx.Commit()
}

// recordSeqs writes qSetStreamSeqCounters and qKeepStreamSeqs for the
// rows the batch numbered.
func (b *StreamBatch) recordSeqs(ctx context.Context) error {
	if len(b.fresh) == 0 {
		return nil
	}
	runs, lasts := make([]string, 0, len(b.last)), make([]int64, 0, len(b.last))
	for run, last := range b.last {
		runs, lasts = append(runs, run), append(lasts, last)
	}
	if _, err := b.tx.ExecContext(ctx, qSetStreamSeqCounters, runs, lasts); err != nil {
		return err
	}
	var ids, seqs []int64
	for _, i := range b.fresh {
		if r := b.Rows[i]; !b.done[r.ID] {
			ids, seqs = append(ids, r.ID), append(seqs, r.Event.Seq)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, qKeepStreamSeqs, ids, seqs)
	return err
}
