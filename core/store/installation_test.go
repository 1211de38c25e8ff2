package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestEveryMigratedDatabaseHasOneInstallationOfItsOwn: migrating creates
// exactly one installation row, a second database gets another id, the
// table refuses a second row, and a second Migrate keeps the id.
func TestEveryMigratedDatabaseHasOneInstallationOfItsOwn(t *testing.T) {
	t.Parallel()
	a, adb, _ := storetest.NewWithDB(t)
	b, _ := storetest.New(t)
	ia, err := a.Installation(t.Context())
	if err != nil {
		t.Fatalf("installation: %v", err)
	}
	ib, err := b.Installation(t.Context())
	if err != nil {
		t.Fatalf("installation: %v", err)
	}
	if ia.ID == uuid.Nil || ia.CreatedAt.IsZero() {
		t.Fatalf("installation %+v, want an id and a creation time", ia)
	}
	if ia.ID == ib.ID {
		t.Fatalf("two databases share the installation %s", ia.ID)
	}
	var n int
	if err := adb.QueryRowContext(t.Context(), `SELECT count(*) FROM installation`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("installation rows: %d, %v; want 1", n, err)
	}
	if _, err := adb.ExecContext(t.Context(), `INSERT INTO installation DEFAULT VALUES`); err == nil {
		t.Fatal("a second installation row was accepted")
	}
	if _, err := a.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	var again uuid.UUID
	if err := adb.QueryRowContext(t.Context(), `SELECT id FROM installation`).Scan(&again); err != nil || again != ia.ID {
		t.Fatalf("after a second migrate the installation is %s (%v), want %s", again, err, ia.ID)
	}
}

// TestInstallationIsCachedAndSaysWhatIsMissing: the answer is read once
// (a row changed by hand afterwards does not change it), and a fresh Store
// on a database whose row is gone gets ErrNotFound.
func TestInstallationIsCachedAndSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	s, db, url := storetest.NewWithDB(t)
	first, err := s.Installation(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `DELETE FROM installation`); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Installation(t.Context()); err != nil || got != first {
		t.Fatalf("cached installation %+v, %v; want %+v", got, err, first)
	}
	fresh, _ := storetest.Open(t, url)
	_, err = fresh.Installation(t.Context())
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "installation table is empty") {
		t.Fatalf("installation of a database without its row: %v, want ErrNotFound saying the table is empty", err)
	}
}

// TestLocationOfNamesHostPortDatabaseAndNeverThePassword: URLs and DSNs,
// with and without a search_path; a URL that does not parse is an error
// that does not show its password.
func TestLocationOfNamesHostPortDatabaseAndNeverThePassword(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		want store.Location
		text string
	}{
		{"postgres://app:s3cret@db.example:6543/flowforge?sslmode=disable", store.Location{Host: "db.example", Port: 6543, Database: "flowforge", User: "app"}, "db.example:6543/flowforge"},
		{"postgres://postgres@127.0.0.1:5432/flowforge_test?search_path=fftest_x", store.Location{Host: "127.0.0.1", Port: 5432, Database: "flowforge_test", User: "postgres", SearchPath: "fftest_x"}, "127.0.0.1:5432/flowforge_test (search_path fftest_x)"},
		{"host=10.0.0.7 port=5433 dbname=ff user=ops password=s3cret", store.Location{Host: "10.0.0.7", Port: 5433, Database: "ff", User: "ops"}, "10.0.0.7:5433/ff"},
		// Multi-host: every server, in the driver's order, each once
		// (sslmode=prefer, the default, tries each twice).
		{"postgres://app:s3cret@db1.example:5432,db2.example:5433/flowforge", store.Location{Host: "db1.example", Port: 5432, Database: "flowforge", User: "app", Fallbacks: []string{"db2.example:5433"}}, "db1.example:5432,db2.example:5433/flowforge"},
		{"host=10.0.0.7,10.0.0.8,10.0.0.7 port=5433 dbname=ff user=ops sslmode=disable", store.Location{Host: "10.0.0.7", Port: 5433, Database: "ff", User: "ops", Fallbacks: []string{"10.0.0.8:5433"}}, "10.0.0.7:5433,10.0.0.8:5433/ff"},
	}
	for _, c := range cases {
		got, err := store.LocationOf(c.url)
		if err != nil {
			t.Fatalf("LocationOf(%s): %v", store.RedactURL(c.url), err)
		}
		if !reflect.DeepEqual(got, c.want) || got.String() != c.text {
			t.Errorf("LocationOf(%s) = %+v %q, want %+v %q", store.RedactURL(c.url), got, got, c.want, c.text)
		}
	}
	_, err := store.LocationOf("postgres://app:s3cret@db.example:notaport/x")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a bad url: %v, want an error without the password", err)
	}
}
