// Package storetest gives tests a freshly migrated, throwaway FlowForge
// database on the PostgreSQL named by FLOWFORGE_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
//
// "Database" here is a schema of its own in the shared database
// flowforge_test, selected through the URL's search_path: creating a schema
// takes milliseconds where CREATE DATABASE takes most of a second. Each call
// creates its own schema and drops it in t.Cleanup. FlowForge's SQL uses
// unqualified names, so it runs unchanged in any schema.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
)

// DefaultAdminURL is used when FLOWFORGE_TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the URL of the server's maintenance database used to
// create throwaway ones.
func AdminURL() string {
	if u := os.Getenv("FLOWFORGE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// NewDatabase creates an empty database and returns its URL; it is dropped
// when the test ends. When the server does not answer the test is skipped,
// unless CI is set, where it fails.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseOn(t, AdminURL())
}

// TestDatabase is the database on the test server that holds the schemas.
const TestDatabase = "flowforge_test"

// NewDatabaseOn is NewDatabase on the server of adminURL.
func NewDatabaseOn(t testing.TB, adminURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
		}
		t.Skipf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+TestDatabase); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42P04" && pe.Code != "23505") { // duplicate_database, or a concurrent create
			t.Fatalf("create database %s: %v", TestDatabase, err)
		}
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("parse %s: %v", store.RedactURL(adminURL), err)
	}
	u.Path = "/" + TestDatabase
	dbURL := u.String()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "fftest_" + hex.EncodeToString(b)
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", store.RedactURL(dbURL), err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	q := u.Query()
	q.Set("search_path", schema)
	// Every session of this test carries the schema as its application
	// name, so a test that inspects pg_stat_activity can see only its own.
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// New returns a migrated store on a throwaway database and its URL.
func New(t testing.TB) (*store.Store, string) {
	t.Helper()
	dbURL := NewDatabase(t)
	return Open(t, dbURL)
}

// Open opens and migrates the database at dbURL; the store is closed in
// t.Cleanup.
func Open(t testing.TB, dbURL string) (*store.Store, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dbURL, store.Options{MaxConns: 40})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, dbURL
}

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
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
		}
		t.Skipf("PostgreSQL at %s does not answer: %v", store.RedactURL(adminURL), err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fftest_db_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("parse %s: %v", store.RedactURL(adminURL), err)
	}
	u.Path = "/" + name
	return u.String()
}
