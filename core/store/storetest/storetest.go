// Package storetest gives tests a freshly migrated, throwaway FlowForge
// database on the PostgreSQL named by FLOWFORGE_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Each call
// creates its own database and drops it in t.Cleanup.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// NewDatabaseOn is NewDatabase on the server of adminURL.
func NewDatabaseOn(t testing.TB, adminURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	name := "fftest_" + hex.EncodeToString(b)
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
