package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// explainText returns the plan of query on db as EXPLAIN (COSTS OFF)
// prints it, its lines joined with newlines; what names the query in a
// failure.
func explainText(t *testing.T, ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, what, query string) string {
	t.Helper()
	rows, err := db.QueryContext(ctx, "EXPLAIN (COSTS OFF) "+query)
	if err != nil {
		t.Fatalf("explain %s: %v", what, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain %s: %v", what, err)
	}
	return strings.Join(plan, "\n")
}
