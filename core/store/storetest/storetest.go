// Package storetest gives tests a freshly migrated, throwaway FlowForge
// database on the PostgreSQL named by FLOWFORGE_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
//
// "Database" here is a schema of its own in the shared database
// flowforge_test (or the one FLOWFORGE_TEST_SCHEMA_DATABASE names),
// selected through the URL's search_path: creating a schema takes
// milliseconds where CREATE DATABASE takes most of a second. Each call
// creates its own schema and drops it in t.Cleanup. FlowForge's SQL uses
// unqualified names, so it runs unchanged in any schema.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/flowforge/flowforge/core/store"
	migrations "github.com/flowforge/flowforge/sql"
)

// AdminURLDefault is used when FLOWFORGE_TEST_DATABASE_URL is unset.
const AdminURLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the URL of the server's maintenance database used to
// create throwaway ones.
func AdminURL() string {
	if u := os.Getenv("FLOWFORGE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return AdminURLDefault
}

// NewDatabase creates an empty database and returns its URL; it is dropped
// when the test ends. When the server does not answer the test is skipped,
// unless CI is set, where it fails.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseOn(t, AdminURL())
}

// TestDatabase is the database on the test server that holds the schemas,
// unless TestDatabaseEnv names another.
const TestDatabase = "flowforge_test"

// TestDatabaseEnv is the environment variable that names the database
// holding the schemas in TestDatabase's place (created on first use and
// kept, as TestDatabase is). What PostgreSQL keeps per database, advisory
// locks (goose's migration lock among them), notification channels and
// pg_stat_activity's datname, is shared by every schema of one database,
// and `make test` runs one package at a time; scripts/mutate, which runs
// two test binaries at once, gives each its own database through it.
const TestDatabaseEnv = "FLOWFORGE_TEST_SCHEMA_DATABASE"

// testDatabase is the database that holds the schemas: TestDatabaseEnv's,
// else TestDatabase.
func testDatabase() string {
	if d := os.Getenv(TestDatabaseEnv); d != "" {
		return d
	}
	return TestDatabase
}

// NewDatabaseOn is NewDatabase on the server of adminURL.
func NewDatabaseOn(t testing.TB, adminURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := connectOrSkip(t, ctx, adminURL)
	defer admin.Close(context.Background())
	name := testDatabase()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42P04" && pe.Code != "23505") { // duplicate_database, or a concurrent create
			t.Fatalf("create database %s: %v", name, err)
		}
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("parse %s: %v", store.RedactURL(adminURL), err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	schema := randomName("fftest_")
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", store.RedactURL(dbURL), err)
	}
	defer db.Close(context.Background())
	createDropped(t, ctx, db, dbURL, "CREATE SCHEMA "+schema, "DROP SCHEMA IF EXISTS "+schema+" CASCADE", schema)
	q := u.Query()
	q.Set("search_path", schema)
	// Every session of this test carries the schema as its application
	// name, so a test that inspects pg_stat_activity can see only its own.
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// MaxConnsDefault bounds the pool of a store from New or Open. Tests share
// one PostgreSQL (max_connections=100) and run in parallel (t.Parallel,
// -parallel GOMAXPROCS), so each test's store stays small: ten connections
// still let ten statements race, which is what the concurrency tests need.
const MaxConnsDefault = 10

// RawConnsDefault bounds the pool DB opens for a test's own queries.
const RawConnsDefault = 4

// New returns a migrated store on a throwaway database and its URL.
func New(t testing.TB) (*store.Store, string) {
	t.Helper()
	dbURL := NewDatabase(t)
	return Open(t, dbURL)
}

// NewWithDB is New plus DB on the same database: the store under test, a
// raw pool for the checks the store's API does not expose (row counts, the
// database clock, locks held from outside), and the database's URL.
func NewWithDB(t testing.TB) (*store.Store, *sql.DB, string) {
	t.Helper()
	s, dbURL := New(t)
	return s, DB(t, dbURL), dbURL
}

// DB opens a database/sql pool ("pgx" driver, at most RawConnsDefault
// connections) on dbURL; it is closed in t.Cleanup. Opening does not
// connect: a bad URL fails at the first query.
func DB(t testing.TB, dbURL string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatalf("open raw connection: %v", err)
	}
	db.SetMaxOpenConns(RawConnsDefault)
	t.Cleanup(func() { db.Close() })
	return db
}

// Open opens (with at most MaxConnsDefault connections) and migrates the
// database at dbURL; the store is closed in t.Cleanup.
func Open(t testing.TB, dbURL string) (*store.Store, string) {
	t.Helper()
	migrating.Lock()
	defer migrating.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dbURL, store.Options{MaxConns: MaxConnsDefault})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, dbURL
}

// migrating serialises Open's migrations within the test binary: every
// schema of one database shares goose's session advisory lock (advisory
// locks are per database), and a migration that finds it taken polls again
// only after 5 s. Parallel tests wait here for each other's few hundred
// milliseconds instead (test binaries running at once wait for each other
// unless TestDatabaseEnv gives each a database). It is the package's only
// state.
var migrating sync.Mutex

// NewPrivateDatabase creates a real database of its own (CREATE DATABASE,
// about a second) on the test server and returns its URL; it is dropped
// (WITH FORCE) in t.Cleanup. Use it where a schema in the shared database
// is not isolation enough: what PostgreSQL tracks per database, such as the
// xmin horizon and pg_stat_activity's transactions, is shared by every
// test's schema. Skipped like NewDatabase when the server does not answer.
func NewPrivateDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adminURL := AdminURL()
	admin := connectOrSkip(t, ctx, adminURL)
	defer admin.Close(context.Background())
	name := randomName("fftest_db_")
	createDropped(t, ctx, admin, adminURL, "CREATE DATABASE "+name, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)", "")
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("parse %s: %v", store.RedactURL(adminURL), err)
	}
	u.Path = "/" + name
	return u.String()
}

// connectOrSkip connects to the test server's admin URL; a server that does
// not answer fails the test under CI and skips it elsewhere.
func connectOrSkip(t testing.TB, ctx context.Context, adminURL string) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
		}
		t.Skipf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
	}
	return admin
}

// createDropped runs create on c and registers drop, run in t.Cleanup on a
// fresh connection to dbURL (c is closed by then). With app set (a
// schema's sessions carry the schema as application_name), a drop that
// waits longer than dropLockWait for a lock first terminates the sessions
// named app that are still open, then drops: a test that failed while it
// held a transaction (a failed assertion between a LockOutbox and its
// Rollback, which a mutant under make mutate makes routine) would
// otherwise hold its schema's drop for the whole cleanup deadline.
func createDropped(t testing.TB, ctx context.Context, c *pgx.Conn, dbURL, create, drop, app string) {
	t.Helper()
	if _, err := c.Exec(ctx, create); err != nil {
		t.Fatalf("%s: %v", create, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Logf("%s: %v", drop, err)
			return
		}
		defer c.Close(context.Background())
		if err := dropAfterSessions(ctx, c, drop, app); err != nil {
			t.Logf("%s: %v", drop, err)
		}
	})
}

// dropLockWait is how long createDropped's drop waits for the locks of a
// test's leftover sessions before it terminates them.
const dropLockWait = 2 * time.Second

// dropAfterSessions runs drop on c; with app set, under lock_timeout
// dropLockWait, and on a lock timeout (SQLSTATE 55P03) it terminates the
// sessions named app and runs drop again.
func dropAfterSessions(ctx context.Context, c *pgx.Conn, drop, app string) error {
	if app == "" {
		_, err := c.Exec(ctx, drop)
		return err
	}
	if _, err := c.Exec(ctx, "SET lock_timeout = "+strconv.Itoa(int(dropLockWait.Milliseconds()))); err != nil {
		return err
	}
	_, err := c.Exec(ctx, drop)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		return err
	}
	if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app); err != nil {
		return fmt.Errorf("terminate the sessions left open: %w", err)
	}
	if _, err := c.Exec(ctx, "SET lock_timeout = 0"); err != nil {
		return err
	}
	_, err = c.Exec(ctx, drop)
	return err
}

// randomName returns prefix and 12 random hex digits.
func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// MigrateTo migrates the empty database at dbURL to schema version only
// (goose's UpTo over the embedded migrations, without the store), for
// tests of what meets an older schema: a migration, an upgrade. It returns
// a DB pool on it (closed in t.Cleanup). A test that then holds a lock a
// migration needs should use NewPrivateDatabase: goose's migration lock is
// an advisory lock, shared by every schema of one database.
func MigrateTo(t testing.TB, dbURL string, version int64) *sql.DB {
	t.Helper()
	db := DB(t, dbURL)
	fsys, err := fs.Sub(migrations.Migrations, migrations.Dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.UpTo(ctx, version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
	return db
}

// RefusedURL returns a PostgreSQL URL (connect_timeout=1) on a local port
// nothing listens on: a client refused at once, for tests of start-up
// retries and unreachable databases.
func RefusedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=1"
}

// ForeignDriverDB returns a database/sql pool whose driver is not pgx's
// (it never connects), closed in t.Cleanup: what store.FromDB and
// client.NewDB refuse.
func ForeignDriverDB(t testing.TB) *sql.DB {
	db := sql.OpenDB(foreignConnector{})
	t.Cleanup(func() { db.Close() })
	return db
}

// foreignConnector and foreignDriver are ForeignDriverDB's driver.
type foreignConnector struct{}

func (foreignConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("storetest: the foreign driver does not connect")
}

func (foreignConnector) Driver() driver.Driver { return foreignDriver{} }

type foreignDriver struct{}

func (foreignDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("storetest: the foreign driver does not connect")
}
