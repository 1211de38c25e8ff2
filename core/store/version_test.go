package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestSchemaWindowAcceptsEveryVersionFromItsMinimumWhileTheFloorAdmitsIt
// checks the window rule on synthetic versions: a binary that runs on 3 and
// knows up to 5 refuses a database below 3 or one whose compat floor is
// above 5, and accepts everything in between, also a database at 7.
func TestSchemaWindowAcceptsEveryVersionFromItsMinimumWhileTheFloorAdmitsIt(t *testing.T) {
	t.Parallel()
	w := store.SchemaWindow{Min: 3, Latest: 5}
	cases := []struct {
		name    string
		db      store.DBSchema
		want    error
		mention []string
	}{
		{"unmigrated", store.DBSchema{}, store.ErrSchemaOutdated, []string{"no FlowForge schema", "ffctl migrate"}},
		{"below the minimum", store.DBSchema{Migrated: true, Version: 2, Floor: 2}, store.ErrSchemaOutdated, []string{"version 2", "at least 3", "ffctl migrate"}},
		{"at the minimum", store.DBSchema{Migrated: true, Version: 3, Floor: 1}, nil, nil},
		{"at its latest", store.DBSchema{Migrated: true, Version: 5, Floor: 5}, nil, nil},
		{"newer, expand migrations only", store.DBSchema{Migrated: true, Version: 7, Floor: 5}, nil, nil},
		{"newer, floor raised by a contract migration", store.DBSchema{Migrated: true, Version: 7, Floor: 6}, store.ErrSchemaTooNew, []string{"version 7", "version 6 or newer", "up to 5", "upgrade ffctl"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := w.Check(c.db)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Check(%+v) = %v, want %v", c.db, err, c.want)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func migrateExec(t *testing.T, dbURL string, queries ...string) {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range queries {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// futureVersion inserts, as if a newer ffctl had migrated, an applied goose
// version and (when floor > 0) its recorded compat floor.
func futureVersion(version, floor int64) []string {
	v, f := strconv.FormatInt(version, 10), strconv.FormatInt(floor, 10)
	q := []string{`INSERT INTO goose_db_version (version_id, is_applied) VALUES (` + v + `, true)`}
	if floor > 0 {
		q = append(q, `INSERT INTO schema_compat (version, min_binary_version) VALUES (`+v+`, `+f+`)`)
	}
	return q
}

// TestCheckSchemaReadsTheFloorTheDatabaseRecorded runs the real binary's
// CheckSchema and Migrate against databases in each state of the window:
// newer versions recorded by a "newer ffctl" with an expand floor are
// accepted (and Migrate is a no-op there), a raised or unrecorded floor is
// refused, a database below the minimum is refused, and a database migrated
// before the floors were recorded is judged by the embedded floors.
func TestCheckSchemaReadsTheFloorTheDatabaseRecorded(t *testing.T) {
	w, err := store.EmbeddedSchemaWindow()
	if err != nil {
		t.Fatal(err)
	}
	next := w.Latest + 1
	cases := []struct {
		name    string
		migrate bool
		setup   []string
		want    error
	}{
		{"unmigrated", false, nil, store.ErrSchemaOutdated},
		{"migrated by this binary", true, nil, nil},
		{"below the minimum", true, []string{`DELETE FROM goose_db_version WHERE version_id >= ` + strconv.FormatInt(w.Min, 10)}, store.ErrSchemaOutdated},
		{"two newer expand migrations", true, append(futureVersion(next, w.Latest), futureVersion(next+1, w.Latest)...), nil},
		{"a newer contract migration", true, append(futureVersion(next, w.Latest), futureVersion(next+1, next+1)...), store.ErrSchemaTooNew},
		{"a newer migration with no recorded floor", true, futureVersion(next, 0), store.ErrSchemaTooNew},
		{"a stale floor row of a migration rolled back", true, []string{`INSERT INTO schema_compat (version, min_binary_version) VALUES (` + strconv.FormatInt(next, 10) + `, ` + strconv.FormatInt(next, 10) + `)`}, nil},
		{"migrated before floors were recorded", true, []string{`DROP TABLE schema_compat`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dbURL := storetest.NewDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := store.Open(ctx, dbURL, store.Options{MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if c.migrate {
				if _, err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
			}
			migrateExec(t, dbURL, c.setup...)
			err = s.CheckSchema(ctx)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("CheckSchema = %v, want %v", err, c.want)
			}
			if !c.migrate || c.want == store.ErrSchemaOutdated {
				return
			}
			// An older binary's migrate inside the window changes nothing;
			// outside it, it refuses.
			res, err := s.Migrate(ctx)
			switch {
			case c.want == nil && (err != nil || len(res.Applied) != 0):
				t.Fatalf("Migrate inside the window = %+v, %v; want a no-op", res, err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("Migrate outside the window = %v, want %v", err, c.want)
			}
		})
	}
}
