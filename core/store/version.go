package store

import (
	"context"
	"fmt"
)

// SchemaVersionMin is the oldest schema version this binary's code runs
// against: the newest migration whose tables or columns the code needs.
// Raise it in the release whose code starts to need a migration; it may stay
// below the newest embedded migration while the code tolerates the schema
// both with and without it. See SchemaWindow and sql/migrations/README.md.
const SchemaVersionMin int64 = 29

// SchemaWindow is the range of schema versions a binary runs against. Min
// is the oldest database version it can use (SchemaVersionMin); Latest is
// its newest embedded migration, the version it reports as its own when it
// meets a database's compatibility floor.
type SchemaWindow struct {
	Min, Latest int64
}

// DBSchema is what a database says about its schema: Migrated is false when
// it has no FlowForge schema at all; Version is the newest applied migration;
// Floor is the oldest binary schema version (a binary's Latest) that may run
// on it: the highest compat floor of any applied migration.
type DBSchema struct {
	Migrated       bool
	Version, Floor int64
}

// Check returns nil when a binary with window w may run on db: db.Version is
// at least w.Min and db.Floor at most w.Latest, even when db.Version is
// newer than w.Latest (expand migrations of a newer release). Otherwise it
// returns an error wrapping ErrSchemaOutdated (unmigrated, or below w.Min;
// the message says to run `ffctl migrate`) or ErrSchemaTooNew (a contract
// migration raised the floor above w.Latest; the message says to upgrade
// ffctl). Both messages name the database's version and this window.
func (w SchemaWindow) Check(db DBSchema) error {
	switch {
	case !db.Migrated || db.Version == 0:
		return fmt.Errorf("%w: the database has no FlowForge schema (this ffctl runs on schema versions %d to %d): run `ffctl migrate`", ErrSchemaOutdated, w.Min, w.Latest)
	case db.Version < w.Min:
		return fmt.Errorf("%w: the database is at schema version %d, this ffctl needs at least %d (it runs on %d to %d): run `ffctl migrate`", ErrSchemaOutdated, db.Version, w.Min, w.Min, w.Latest)
	case db.Floor > w.Latest:
		return fmt.Errorf("%w: the database is at schema version %d, which needs an ffctl of schema version %d or newer; this ffctl knows only up to %d: upgrade ffctl", ErrSchemaTooNew, db.Version, db.Floor, w.Latest)
	}
	return nil
}

// EmbeddedSchemaWindow returns this binary's window: SchemaVersionMin and
// the newest embedded migration. It returns an error when the embedded
// migrations cannot be read (see EmbeddedMigrations).
func EmbeddedSchemaWindow() (SchemaWindow, error) {
	ms, err := EmbeddedMigrations()
	if err != nil {
		return SchemaWindow{}, err
	}
	return windowOf(ms), nil
}

// windowOf is the window of a binary with the embedded migrations ms.
func windowOf(ms []Migration) SchemaWindow {
	w := SchemaWindow{Min: SchemaVersionMin}
	for _, m := range ms {
		w.Latest = max(w.Latest, m.Version)
	}
	return w
}

// Queries of SchemaState: whether goose's table and the compatibility
// record exist, the versions applied, and the floors Migrate recorded.
const (
	schemaTablesExist = `SELECT to_regclass('goose_db_version') IS NOT NULL, to_regclass('schema_compat') IS NOT NULL`
	appliedVersions   = `SELECT DISTINCT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`
	recordedFloors    = `SELECT version, min_binary_version FROM schema_compat`
)

// schemaApplied is SchemaState's one-query path, for a database that has
// both goose's table and the compatibility record: every applied version
// with the floor Migrate recorded for it (NULL: none). Where either table
// is missing it fails with undefined_table and SchemaState asks again
// table by table.
const schemaApplied = `
SELECT g.version_id, c.min_binary_version
  FROM (SELECT DISTINCT version_id FROM goose_db_version WHERE is_applied AND version_id > 0) g
  LEFT JOIN schema_compat c ON c.version = g.version_id`

// SchemaState reads the database's schema version and compatibility floor.
// The floor of an applied version is the one Migrate recorded in
// schema_compat; for a version it lacks (a database migrated by a binary
// older than the record, or by hand) this binary's own embedded floor, and
// for a version this binary does not know either, the version itself (a
// contract migration: the safe default).
func (s *Store) SchemaState(ctx context.Context) (DBSchema, error) {
	ms, err := EmbeddedMigrations()
	if err != nil {
		return DBSchema{}, err
	}
	return s.schemaState(ctx, ms)
}

// schemaState is SchemaState with this binary's embedded migrations ms
// (read once by CheckSchema for the window and the floors).
func (s *Store) schemaState(ctx context.Context, ms []Migration) (DBSchema, error) {
	known := make(map[int64]int64, len(ms))
	for _, m := range ms {
		known[m.Version] = m.CompatFloor
	}
	var rows []struct {
		Version int64  `db:"version_id"`
		Floor   *int64 `db:"min_binary_version"`
	}
	switch err := s.db.SelectContext(ctx, &rows, schemaApplied, s.args()...); {
	case err == nil:
		applied := make([]int64, len(rows))
		recorded := map[int64]int64{}
		for i, r := range rows {
			applied[i] = r.Version
			if r.Floor != nil {
				recorded[r.Version] = *r.Floor
			}
		}
		return schemaOf(applied, recorded, known), nil
	case pgCode(err) != "42P01": // undefined_table: ask table by table
		return DBSchema{}, fmt.Errorf("read schema state: %w", err)
	}
	return s.schemaStateByTable(ctx, known)
}

// schemaStateByTable is SchemaState for a database that lacks goose's
// table or the compatibility record (unmigrated, or migrated before floors
// were recorded): it checks which exist before reading them.
func (s *Store) schemaStateByTable(ctx context.Context, known map[int64]int64) (DBSchema, error) {
	var gooseTable, compatTable bool
	if err := s.db.QueryRowContext(ctx, schemaTablesExist).Scan(&gooseTable, &compatTable); err != nil {
		return DBSchema{}, fmt.Errorf("read schema state: %w", err)
	}
	if !gooseTable {
		return DBSchema{}, nil
	}
	var applied []int64
	if err := s.db.SelectContext(ctx, &applied, appliedVersions); err != nil {
		return DBSchema{}, fmt.Errorf("read schema versions: %w", err)
	}
	recorded := map[int64]int64{}
	if compatTable {
		var rows []struct {
			Version int64 `db:"version"`
			Floor   int64 `db:"min_binary_version"`
		}
		if err := s.db.SelectContext(ctx, &rows, recordedFloors); err != nil {
			return DBSchema{}, fmt.Errorf("read schema compat floors: %w", err)
		}
		for _, r := range rows {
			recorded[r.Version] = r.Floor
		}
	}
	return schemaOf(applied, recorded, known), nil
}

// schemaOf is the schema state of a database with the applied versions:
// the newest, and the highest floor of any (recorded, else known to this
// binary, else the version itself).
func schemaOf(applied []int64, recorded, known map[int64]int64) DBSchema {
	st := DBSchema{Migrated: true}
	for _, v := range applied {
		st.Version = max(st.Version, v)
		floor, ok := recorded[v]
		if !ok {
			if floor, ok = known[v]; !ok {
				floor = v
			}
		}
		st.Floor = max(st.Floor, floor)
	}
	return st
}

// CheckSchema returns nil when this binary may run on the database's
// schema (see SchemaWindow.Check): the database is at least at
// SchemaVersionMin and its compatibility floor is not above this binary's
// newest migration. It returns an error wrapping ErrSchemaOutdated or
// ErrSchemaTooNew (with what to do) otherwise, or the error of reading the
// schema state.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := EmbeddedMigrations()
	if err != nil {
		return err
	}
	w := windowOf(ms)
	st, err := s.schemaState(ctx, ms)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	return w.Check(st)
}
