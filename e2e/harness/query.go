package harness

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// QueryInt runs query (one row, one integer column, e.g. a count(*)) on db
// with args, bounded by 10 s, and returns the integer; it fails the test
// on an error.
func QueryInt(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
