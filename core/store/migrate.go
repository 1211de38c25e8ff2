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
 WHERE schema_compat.min_binary_version < EXCLUDED.min_binary_version`
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
