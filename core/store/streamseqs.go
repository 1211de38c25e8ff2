package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// AssignStreamSeqs numbers up to limit unnumbered stream rows that are
// visible now, oldest id first, and stores the numbers: each run's rows
// get the run's next numbers in id order, after the last one it was given
// (transition_stream_seqs, which outlives the deletion of published rows).
// It is the stream's fallback while a mark cannot settle (LockStream: a
// transaction that wrote a transition stays open), so that such a
// transaction holds back no other run's events for longer than
// streamMarkPatience. It runs in one transaction that first takes the
// assigners' advisory lock (streamSeqLock), and returns how many rows it
// numbered. Numbers are committed before any of those rows is published,
// so a row published again after a crash carries the same seq and event
// id. Errors: a limit below 1, or the database's.
//
// Each task's (and run's) rows are in commit order by id (streambatch.go
// says why), and the row of a task's earlier transition is committed,
// hence visible, whenever the later one is. Rows of different tasks may
// commit out of id order; numbering the committed ones first is harmless
// (each task's order is kept) and keeps seq gap-free: every number is
// given once, under the lock, and the numbers stored here are taken
// before any publishing batch numbers a row (it reads the counters under
// the same lock, after this commit).
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
		if _, err := tx.ExecContext(ctx, streamSeqLock+", "+streamIndexScans); err != nil {
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
		if err := readRunSeqs(ctx, tx, last, qBumpStreamSeqs, p.runs, p.counts); err != nil {
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

// readRunSeqs runs query (which returns run ids and last numbers) and
// sets each run's number in into.
func readRunSeqs(ctx context.Context, tx *sqlx.Tx, into map[string]int64, query string, args ...any) error {
	rows, err := tx.QueryxContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var run string
		var seq int64
		if err := rows.Scan(&run, &seq); err != nil {
			return err
		}
		into[run] = seq
	}
	return rows.Err()
}

// qStreamUnnumbered reads up to $1 unnumbered rows, oldest id first; run
// after streamSeqLock and streamIndexScans.
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
