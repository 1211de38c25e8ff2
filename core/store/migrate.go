package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	migrations "github.com/flowforge/flowforge/sql"
)

func (s *Store) provider() (*goose.Provider, error) {
	return newProvider(s.db.DB)
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	fsys, err := fs.Sub(migrations.Migrations, migrations.Dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
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

// MigrationResult says what Migrate did: the schema version before and
// after, and the files applied.
type MigrationResult struct {
	From, To int64
	Applied  []string
}

// Migrate applies every pending migration under a PostgreSQL advisory lock,
// so concurrent callers are safe. Re-running is a no-op.
func (s *Store) Migrate(ctx context.Context) (MigrationResult, error) {
	p, err := s.provider()
	if err != nil {
		return MigrationResult{}, err
	}
	from, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrationResult{}, fmt.Errorf("read schema version: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return MigrationResult{}, fmt.Errorf("migrate: %w", err)
	}
	out := MigrationResult{From: from, To: from}
	for _, r := range res {
		out.Applied = append(out.Applied, r.Source.Path)
		out.To = r.Source.Version
	}
	return out, nil
}

// CheckSchema returns nil when the database's schema is exactly the one this
// binary embeds; an error wrapping ErrSchemaOutdated (with the command to
// run) when it is behind or unmigrated; one wrapping ErrSchemaTooNew when a
// newer ffctl migrated it.
func (s *Store) CheckSchema(ctx context.Context) error {
	p, err := s.provider()
	if err != nil {
		return err
	}
	var exists bool
	if err := s.db.QueryRowContext(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	want := int64(0)
	for _, src := range p.ListSources() {
		if src.Version > want {
			want = src.Version
		}
	}
	if !exists {
		return fmt.Errorf("%w: the database has no FlowForge schema (this ffctl needs version %d): run `ffctl migrate`", ErrSchemaOutdated, want)
	}
	var have int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&have); err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	switch {
	case have < want:
		return fmt.Errorf("%w: the database is at schema version %d, this ffctl needs %d: run `ffctl migrate`", ErrSchemaOutdated, have, want)
	case have > want:
		return fmt.Errorf("%w: the database is at schema version %d, this ffctl knows only up to %d: upgrade ffctl", ErrSchemaTooNew, have, want)
	}
	return nil
}
