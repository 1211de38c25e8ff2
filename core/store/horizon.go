package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// XminHorizonWarnDefault is how long the xmin horizon may be held back (by a
// transaction, prepared transaction or replication slot) before FlowForge
// calls it a problem: while it is held, VACUUM removes no dead row of the
// hot tables, and every sweep and publisher batch reads more of them.
const XminHorizonWarnDefault = 5 * time.Minute

// HotTables returns the tables whose dead tuples DBHealth reports: those
// every state change rewrites.
func HotTables() []string {
	return []string{"task_runs", "outbox", "workflow_runs", "task_events", "idempotency_keys"}
}

// HorizonHolder is what holds the xmin horizon back the longest.
type HorizonHolder struct {
	// Kind is "session", "prepared transaction" or "replication slot".
	Kind string
	// Name is the session's pid, the prepared transaction's gid or the
	// slot's name.
	Name string
	// Application is the session's application_name ("" for the others).
	Application string
	// State is the session's state ("idle in transaction", "active"), or
	// "prepared", or the slot's "active"/"inactive".
	State string
	// Query is the start of the session's last query (at most 200 bytes).
	Query string
	// Seconds is how long it has held the horizon (database clock; 0 for a
	// replication slot, whose age is known only in transactions).
	Seconds float64
}

// String describes h for a log line or an error: "session 4242
// (application psql, idle in transaction, 6m12s): SELECT ...".
func (h HorizonHolder) String() string {
	d := (time.Duration(h.Seconds * float64(time.Second))).Round(time.Second)
	s := fmt.Sprintf("%s %s (", h.Kind, h.Name)
	if h.Application != "" {
		s += "application " + h.Application + ", "
	}
	s += h.State
	if h.Kind != "replication slot" {
		s += ", " + d.String()
	}
	s += ")"
	if h.Query != "" {
		s += ": " + h.Query
	}
	return s
}

// DBHealth is what the database says about the sessions that hold back
// VACUUM and the dead rows of the hot tables. Only this database counts
// (PostgreSQL 14 and later compute the horizon of user tables per
// database); the reading session itself is left out. Sessions of other
// roles are seen only with pg_read_all_stats (pg_monitor).
type DBHealth struct {
	// Now is the database clock at the read.
	Now time.Time
	// OldestTransactionSeconds is the age of the oldest open transaction
	// (including prepared ones), 0 when none is open.
	OldestTransactionSeconds float64
	// HorizonSeconds is the age of the oldest transaction that holds the
	// xmin horizon back (it holds a snapshot or a transaction id), 0 when
	// none does.
	HorizonSeconds float64
	// HorizonXIDs is how many transaction ids the horizon lags behind (the
	// largest age() of a holder's xmin or xid, replication slots
	// included), 0 when nothing holds it.
	HorizonXIDs int64
	// Holder is the oldest holder; nil when none.
	Holder *HorizonHolder
	// DeadTuples holds n_dead_tup per hot table (HotTables) of the current
	// schema, as last reported by the statistics system.
	DeadTuples map[string]int64
}

const qHorizonHolders = `
WITH holders AS (
    SELECT 'session' AS kind, pid::text AS name, coalesce(application_name, '') AS app,
           coalesce(state, '') AS state, left(coalesce(query, ''), 200) AS query,
           xact_start AS since,
           greatest(age(backend_xmin), age(backend_xid)) AS xids
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
    UNION ALL
    SELECT 'prepared transaction', gid, '', 'prepared', '', prepared, age(transaction)
    FROM pg_prepared_xacts
    WHERE database = current_database()
    UNION ALL
    SELECT 'replication slot', slot_name, '', CASE WHEN active THEN 'active' ELSE 'inactive' END, '', NULL,
           greatest(age(xmin), age(catalog_xmin))
    FROM pg_replication_slots
    WHERE (database IS NULL OR database = current_database())
      AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
),
oldest_tx AS (
    SELECT min(t) AS since FROM (
        SELECT xact_start AS t FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
        UNION ALL
        SELECT prepared FROM pg_prepared_xacts WHERE database = current_database()
    ) s
),
oldest AS (
    SELECT * FROM holders ORDER BY since ASC NULLS LAST, xids DESC NULLS LAST LIMIT 1
)
SELECT now(),
       coalesce(extract(epoch FROM now() - (SELECT since FROM oldest_tx)), 0)::float8,
       coalesce((SELECT max(xids) FROM holders), 0)::bigint,
       o.kind, o.name, o.app, o.state, o.query,
       coalesce(extract(epoch FROM now() - o.since), 0)::float8
FROM (SELECT 1) one LEFT JOIN oldest o ON true`

const qDeadTuples = `
SELECT relname, n_dead_tup
FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname = ANY($1)`

// DBHealth reads the oldest transaction, the xmin horizon's holder and the
// hot tables' dead tuples (two catalog reads, no table scans). Errors: the
// database does not answer.
func (s *Store) DBHealth(ctx context.Context) (DBHealth, error) {
	var h DBHealth
	var kind, name, app, state, query sql.NullString
	var holderSeconds float64
	err := s.db.QueryRowContext(ctx, qHorizonHolders).Scan(&h.Now, &h.OldestTransactionSeconds, &h.HorizonXIDs,
		&kind, &name, &app, &state, &query, &holderSeconds)
	if err != nil {
		return DBHealth{}, fmt.Errorf("read xmin horizon: %w", err)
	}
	if kind.Valid {
		h.Holder = &HorizonHolder{Kind: kind.String, Name: name.String, Application: app.String, State: state.String, Query: query.String, Seconds: holderSeconds}
		h.HorizonSeconds = holderSeconds
	}
	hot := HotTables()
	rows, err := s.db.QueryContext(ctx, qDeadTuples, hot)
	if err != nil {
		return DBHealth{}, fmt.Errorf("read dead tuples: %w", err)
	}
	defer rows.Close()
	h.DeadTuples = make(map[string]int64, len(hot))
	for _, t := range hot {
		h.DeadTuples[t] = 0
	}
	for rows.Next() {
		var rel string
		var n int64
		if err := rows.Scan(&rel, &n); err != nil {
			return DBHealth{}, fmt.Errorf("read dead tuples: %w", err)
		}
		h.DeadTuples[rel] = n
	}
	if err := rows.Err(); err != nil {
		return DBHealth{}, fmt.Errorf("read dead tuples: %w", err)
	}
	return h, nil
}
