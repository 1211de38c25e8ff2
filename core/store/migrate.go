package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	migrations "github.com/flowforge/flowforge/sql"
)

// SchemaVersionMin is the oldest schema version this binary's code runs
// against: the newest migration whose tables or columns the code needs.
// Raise it in the release whose code starts to need a migration; it may stay
// below the newest embedded migration while the code tolerates the schema
// both with and without it. See SchemaWindow and sql/migrations/README.md.
const SchemaVersionMin int64 = 5

// compatFloorAnnotation is the line every migration file carries:
// "-- flowforge:compat-floor N", N being the oldest binary schema version
// (a binary's newest known migration) that still runs on the schema once
// this migration is applied. An expand migration repeats the previous floor;
// a contract migration raises it.
var compatFloorAnnotation = regexp.MustCompile(`(?m)^--\s*flowforge:compat-floor\s+(\S+)\s*$`)

// Queries of the compatibility record. schema_compat is bookkeeping of the
// migrator, like goose's goose_db_version: Migrate creates it, and records
// the floor of each migration it knows BEFORE applying it, so the floor is
// in force the moment the migration commits; only rows of applied versions
// count.
const (
	createSchemaCompat = `
CREATE TABLE IF NOT EXISTS schema_compat (
    version            bigint      PRIMARY KEY,
    min_binary_version bigint      NOT NULL CHECK (min_binary_version >= 1),
    recorded_at        timestamptz NOT NULL DEFAULT now()
)`
	lockSchemaCompat   = `SELECT pg_advisory_xact_lock(hashtext('flowforge.schema_compat'))`
	upsertSchemaCompat = `
INSERT INTO schema_compat (version, min_binary_version) VALUES ($1, $2)
ON CONFLICT (version) DO UPDATE SET min_binary_version = EXCLUDED.min_binary_version, recorded_at = now()
 WHERE schema_compat.min_binary_version <> EXCLUDED.min_binary_version`
	schemaTablesExist = `SELECT to_regclass('goose_db_version') IS NOT NULL, to_regclass('schema_compat') IS NOT NULL`
	appliedVersions   = `SELECT DISTINCT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`
	recordedFloors    = `SELECT version, min_binary_version FROM schema_compat`
)

func (s *Store) provider() (*goose.Provider, error) {
	return newProvider(s.db.DB)
}

func migrationsFS() (fs.FS, error) {
	fsys, err := fs.Sub(migrations.Migrations, migrations.Dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return fsys, nil
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	fsys, err := migrationsFS()
	if err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

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

// Migration is one embedded migration: its version, its file's path inside
// the migrations directory, and its compat floor (Declared is false when the
// file lacks the annotation and the floor defaulted to Version).
type Migration struct {
	Version, CompatFloor int64
	Path                 string
	Declared             bool
}

// EmbeddedMigrations returns the migrations this binary embeds, oldest
// first, with the compat floor each declares. A file without the
// "-- flowforge:compat-floor N" line gets floor = its own version (treated as
// a contract migration: the safe default). It returns an error when a file
// cannot be read or declares a floor that is not a number between 1 and its
// version, or several floors.
func EmbeddedMigrations() ([]Migration, error) {
	fsys, err := migrationsFS()
	if err != nil {
		return nil, err
	}
	paths, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var out []Migration
	for _, path := range paths { // fs.Glob sorts; the names are zero-padded
		version, err := goose.NumericComponent(path)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", path, err)
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", path, err)
		}
		m := Migration{Version: version, CompatFloor: version, Path: path}
		found := compatFloorAnnotation.FindAllSubmatch(b, -1)
		switch {
		case len(found) > 1:
			return nil, fmt.Errorf("migration %s: %d compat-floor lines, want one", path, len(found))
		case len(found) == 1:
			n, err := strconv.ParseInt(string(found[0][1]), 10, 64)
			if err != nil || n < 1 || n > version {
				return nil, fmt.Errorf("migration %s: compat-floor %q: want a number from 1 to %d", path, found[0][1], version)
			}
			m.CompatFloor, m.Declared = n, true
		}
		out = append(out, m)
	}
	return out, nil
}

// EmbeddedSchemaWindow returns this binary's window: SchemaVersionMin and
// the newest embedded migration. It returns an error when the embedded
// migrations cannot be read (see EmbeddedMigrations).
func EmbeddedSchemaWindow() (SchemaWindow, error) {
	ms, err := EmbeddedMigrations()
	if err != nil {
		return SchemaWindow{}, err
	}
	w := SchemaWindow{Min: SchemaVersionMin}
	for _, m := range ms {
		w.Latest = max(w.Latest, m.Version)
	}
	return w, nil
}

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
	known := make(map[int64]int64, len(ms))
	for _, m := range ms {
		known[m.Version] = m.CompatFloor
	}
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
	return st, nil
}

// MigrationResult says what Migrate did: the schema version before and
// after, and the files applied.
type MigrationResult struct {
	From, To int64
	Applied  []string
}

// Migrate records the compat floor of every embedded migration in
// schema_compat (creating it), then applies every pending migration under a
// PostgreSQL advisory lock, so concurrent callers are safe. Re-running is a
// no-op, and so is running it with a binary older than the database when
// the database's floor admits that binary. It returns an error wrapping
// ErrSchemaTooNew, and changes nothing, when a contract migration raised
// the database's floor above this binary's newest migration. On an error the
// result still names the migrations applied before the one that failed.
func (s *Store) Migrate(ctx context.Context) (MigrationResult, error) {
	w, err := EmbeddedSchemaWindow()
	if err != nil {
		return MigrationResult{}, err
	}
	st, err := s.SchemaState(ctx)
	if err != nil {
		return MigrationResult{}, err
	}
	if st.Migrated && st.Floor > w.Latest {
		return MigrationResult{}, fmt.Errorf("migrate: %w", w.Check(st))
	}
	if err := s.recordCompatFloors(ctx); err != nil {
		return MigrationResult{}, err
	}
	p, err := s.provider()
	if err != nil {
		return MigrationResult{}, err
	}
	from, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrationResult{}, fmt.Errorf("read schema version: %w", err)
	}
	res, err := p.Up(ctx)
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		res = partial.Applied
	}
	out := MigrationResult{From: from, To: from}
	for _, r := range res {
		out.Applied = append(out.Applied, r.Source.Path)
		out.To = r.Source.Version
	}
	if err != nil {
		return out, fmt.Errorf("migrate: %w", err)
	}
	return out, nil
}

// recordCompatFloors writes the embedded migrations' floors into
// schema_compat in one transaction (serialised by an advisory lock, so
// concurrent migrators do not race on CREATE TABLE).
func (s *Store) recordCompatFloors(ctx context.Context) error {
	ms, err := EmbeddedMigrations()
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record schema compat floors: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, lockSchemaCompat); err != nil {
		return fmt.Errorf("record schema compat floors: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, createSchemaCompat); err != nil {
		return fmt.Errorf("record schema compat floors: create table: %w", err)
	}
	for _, m := range ms {
		if _, err := tx.ExecContext(ctx, upsertSchemaCompat, m.Version, m.CompatFloor); err != nil {
			return fmt.Errorf("record schema compat floor of version %d: %w", m.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record schema compat floors: %w", err)
	}
	return nil
}

// CheckSchema returns nil when this binary may run on the database's
// schema (see SchemaWindow.Check): the database is at least at
// SchemaVersionMin and its compatibility floor is not above this binary's
// newest migration. It returns an error wrapping ErrSchemaOutdated or
// ErrSchemaTooNew (with what to do) otherwise, or the error of reading the
// schema state.
func (s *Store) CheckSchema(ctx context.Context) error {
	w, err := EmbeddedSchemaWindow()
	if err != nil {
		return err
	}
	st, err := s.SchemaState(ctx)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	return w.Check(st)
}
