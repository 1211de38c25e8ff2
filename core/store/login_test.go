package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
)

// TestIsLoginRefusedTellsAMisconfigurationFromAnOutage: mode 91. A wrong
// password, an unknown role or database (wrapped or not) is a refusal a
// daemon exits on at start; no answer, a server starting or shutting
// down, too many connections or any other answer is not.
func TestIsLoginRefusedTellsAMisconfigurationFromAnOutage(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("connect to database: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"wrong password", pg("28P01"), true},
		{"unknown role or no pg_hba entry", pg("28000"), true},
		{"unknown database", pg("3D000"), true},
		{"no answer", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{"a context that ended", fmt.Errorf("connect: %w", context.DeadlineExceeded), false},
		{"starting up", pg("57P03"), false},
		{"admin shutdown", pg("57P01"), false},
		{"too many connections", pg("53300"), false},
		{"connection exception", pg("08006"), false},
		{"insufficient privilege", pg("42501"), false},
	} {
		if got := store.IsLoginRefused(tc.err); got != tc.want {
			t.Errorf("%s: IsLoginRefused(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
