package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The transition stream (migration 23): PostgreSQL triggers write a row of
// transition_stream for every run and task transition in the transaction
// that makes it, while transition_stream_setting holds its one row (the
// stream is on). The publisher numbers the rows and publishes them in one
// transaction (LockStream, streambatch.go) and deletes each one the broker
// confirmed (DeletePublished, migration 26): the table holds only the
// backlog. The prune and delete of runs take a run's rows with it.

// ErrStreamOff is returned by StreamSetting when the stream is off (no
// setting row).
var ErrStreamOff = errors.New("the transition stream is off (start or restart a publisher with --events-exchange NAME: it turns the stream on when it starts)")

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
// commit on no transition writes a stream row. The rows already written
// are still published, to the exchange the stream went to: the same
// statement records it in transition_stream_drain (migration 29), with
// actor as off_by, and every publisher publishes the rows left there
// while the stream is off (StreamDrain). It reports whether the stream was
// on. Errors: the database's.
func (s *Store) DisableStream(ctx context.Context, actor string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `
WITH off AS (DELETE FROM transition_stream_setting RETURNING exchange)
INSERT INTO transition_stream_drain (exchange, off_by) SELECT exchange, $1 FROM off
ON CONFLICT (one_row) DO UPDATE SET exchange = excluded.exchange, off_at = now(), off_by = excluded.off_by`, actor)
	if err != nil {
		return false, fmt.Errorf("disable transition stream: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("disable transition stream: %w", err)
	}
	return n > 0, nil
}

// StreamDrain is where the rows left in the stream go while it is off:
// the exchange it went to when it was last turned off (DisableStream),
// when and by whom.
type StreamDrain struct {
	Exchange string    `db:"exchange" json:"exchange"`
	OffAt    time.Time `db:"off_at" json:"off_at"`
	OffBy    string    `db:"off_by" json:"off_by"`
}

// StreamDrain reads where the rows left go while the stream is off.
// Errors: ErrNotFound when the stream has not been turned off since
// migration 29 (no drain row), or the database's.
func (s *Store) StreamDrain(ctx context.Context) (StreamDrain, error) {
	var d StreamDrain
	err := s.db.GetContext(ctx, &d, `SELECT exchange, off_at, off_by FROM transition_stream_drain`)
	if errors.Is(err, sql.ErrNoRows) {
		return StreamDrain{}, ErrNotFound
	}
	if err != nil {
		return StreamDrain{}, fmt.Errorf("read transition stream drain: %w", err)
	}
	return d, nil
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
	// Failing counts the pending rows a publish has already failed for
	// (publish_attempts above 0: the broker refused them or did not
	// confirm them); they are published again with the same seq.
	Failing int64 `db:"failing" json:"failing"`
	// LastError is the error recorded for the newest failing row, "" when
	// none is failing.
	LastError string `db:"-" json:"last_error"`
}

// qStreamStatus counts the backlog in one scan and reads the oldest
// pending row's age over the primary key.
const qStreamStatus = `
SELECT count(*) AS pending, count(*) FILTER (WHERE publish_attempts > 0) AS failing,
       coalesce((SELECT extract(epoch FROM now() - at)::float8 FROM transition_stream WHERE published_at IS NULL ORDER BY id LIMIT 1), 0) AS oldest_pending_seconds
  FROM transition_stream WHERE published_at IS NULL`

// StreamStatus reads the stream's backlog (every row not yet published)
// and, when some rows are failing, the newest one's error. Errors: the
// database's.
func (s *Store) StreamStatus(ctx context.Context) (StreamStatus, error) {
	var st StreamStatus
	if err := s.db.GetContext(ctx, &st, qStreamStatus); err != nil {
		return StreamStatus{}, fmt.Errorf("transition stream status: %w", err)
	}
	if st.Failing == 0 {
		return st, nil
	}
	err := s.db.GetContext(ctx, &st.LastError, `
SELECT coalesce(last_error, '') FROM transition_stream WHERE published_at IS NULL AND publish_attempts > 0 ORDER BY id DESC LIMIT 1`)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // published in between: nothing failing any more
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
