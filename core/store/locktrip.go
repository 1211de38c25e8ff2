package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// qLocalLockTimeout sets lock_timeout for the rest of the transaction it
// runs in (set_config's is_local: the pooled session keeps its own).
const qLocalLockTimeout = `SELECT set_config('lock_timeout', $1, true)`

// lockTimeoutSetting is d as lock_timeout takes it: whole milliseconds.
func lockTimeoutSetting(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// qLocalSettings sets each setting $1[i] to $2[i] for the rest of the
// transaction it runs in.
const qLocalSettings = `SELECT set_config(s.name, s.value, true) FROM unnest($1::text[], $2::text[]) AS s(name, value)`

// tripSettings are the settings inOneTrip gives its statement, for that
// statement alone.
type tripSettings struct {
	// LockWait, when above zero, is the statement's lock_timeout.
	LockWait time.Duration
	// KeyPlan has the statement planned once per connection and kept
	// (plan_cache_mode = force_generic_plan) as a plan of key lookups:
	// nested loops over index scans (enable_seqscan, enable_hashjoin and
	// enable_mergejoin off). It is for the hot path's statements (claim,
	// renew, finish, trigger), each of which reads every row it touches by
	// a key it is given or has just read, so that such a plan is the right
	// one whatever the tables hold: planned afresh, a batch's array
	// parameters cost a millisecond or more of planning per call (more than
	// running it), and a plan left to the statistics is wrong for a table
	// that was analysed empty, or while few tasks were READY, when a
	// backlog then arrives (a sequential scan, or a walk of the whole READY
	// index, on every claim until the next ANALYZE). The settings end with
	// the statement; TestTheHotPathsCachedPlansLookRowsUpByKey checks each
	// statement's plan under them.
	KeyPlan bool
}

// namesAndValues returns the settings as qLocalSettings takes them.
func (t tripSettings) namesAndValues() (names, values []string) {
	if t.LockWait > 0 {
		names, values = append(names, "lock_timeout"), append(values, lockTimeoutSetting(t.LockWait))
	}
	if t.KeyPlan {
		for _, kv := range [][2]string{
			{"plan_cache_mode", "force_generic_plan"},
			{"enable_seqscan", "off"},
			{"enable_hashjoin", "off"},
			{"enable_mergejoin", "off"},
		} {
			names, values = append(names, kv[0]), append(values, kv[1])
		}
	}
	return names, values
}

// inOneTrip runs query with args as ONE statement that commits on its own,
// with the settings set (its lock waits bounded, its plan made for its
// parameters), in one network round trip: the settings (qLocalSettings)
// and the statement go out as one pgx batch, which the server runs as one
// implicit transaction (one Sync), so the settings hold for the statement
// and end with it. A transaction of BEGIN, the
// setting, the statement and COMMIT took four round trips; this takes one
// once the connection has the statement prepared (pgx's statement cache).
// scan reads the statement's rows (nil: none read). The statement commits
// when the batch's Sync is answered: an error without an SQLSTATE means no
// answer came, and it may have committed (see unanswered); a lock wait
// past LockWait fails it with SQLSTATE 55P03 (asLockTimeout), nothing
// written.
func (s *Store) inOneTrip(ctx context.Context, set tripSettings, query string, args []any, scan func(pgx.Rows) error) error {
	return s.onPgxConn(ctx, func(c *pgx.Conn) error {
		br := c.SendBatch(ctx, tripBatch(set, query, args))
		err := readOneTrip(br, scan)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// onPgxConn runs fn on a connection of the pool as pgx's own (a one-trip
// statement sends its batch on it).
func (s *Store) onPgxConn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("one-trip statement: driver connection is %T, not pgx's", dc)
		}
		return fn(c.Conn())
	})
}

// tripBatch is a one-trip statement's batch: its settings
// (qLocalSettings), then the statement.
func tripBatch(set tripSettings, query string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	names, values := set.namesAndValues()
	b.Queue(qLocalSettings, names, values)
	b.Queue(query, args...)
	return b
}

// readOneTrip reads inOneTrip's two results: the settings', then the
// statement's rows through scan.
func readOneTrip(br pgx.BatchResults, scan func(pgx.Rows) error) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("local settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if scan != nil {
		if err := scan(rows); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	return rows.Err()
}

// qNotifyAfterCommit sends a notification from a transaction of its own
// that writes nothing and is committed without waiting for its WAL to
// reach disk (synchronous_commit off: losing it to a crash loses a wake-up
// the listeners' periodic polls cover, never data).
const qNotifyAfterCommit = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`

// inOneTripNotifying is inOneTrip for a statement whose notifications ns
// are sent after it committed, in one round trip still (sendNotifying). A
// NOTIFY inside the statement's transaction would hold PostgreSQL's
// notification lock (one per database) across its commit's WAL flush, so
// every notifying commit would wait for the one before it to reach disk
// (seen: triggers at 300 a second queued behind each other for up to 200
// ms). The statement's outcome is known once COMMIT is answered; an error
// of the notification after it is not returned (the listeners' polls
// cover a lost wake-up). Errors are inOneTrip's.
func (s *Store) inOneTripNotifying(ctx context.Context, set tripSettings, query string, args []any, scan func(pgx.Rows) error, ns ...notice) error {
	return s.onPgxConn(ctx, func(c *pgx.Conn) error {
		return sendNotifying(ctx, c, set, query, args, scan, ns...)
	})
}

// sendNotifying sends on c, as one pgx batch (one round trip): BEGIN, the
// settings, the statement, COMMIT (its commit waits for its WAL with every
// other commit, group commit) and qNotifyAfterCommit per notification,
// each in a transaction of its own after the COMMIT. The BEGIN makes the
// COMMIT end a transaction block: without it the COMMIT ended the batch's
// implicit transaction all the same, but PostgreSQL warned "there is no
// transaction in progress" for every statement sent so, a line in the
// server's log for each run triggered. When the statement fails, the
// server skips the rest of the batch and leaves the block aborted; it is
// rolled back here, so the connection goes back to the pool idle (closed
// when even that fails).
func sendNotifying(ctx context.Context, c *pgx.Conn, set tripSettings, query string, args []any, scan func(pgx.Rows) error, ns ...notice) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	names, values := set.namesAndValues()
	b.Queue(qLocalSettings, names, values)
	b.Queue(query, args...)
	b.Queue("COMMIT")
	for _, n := range ns {
		b.Queue(qNotifyAfterCommit, n.channel, n.payload)
	}
	br := c.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := readOneTrip(br, scan); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}()
	_ = br.Close() // the notification's fate is not the statement's
	if err != nil && c.PgConn().TxStatus() != 'I' && !c.IsClosed() {
		if _, rerr := c.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}
	return err
}
