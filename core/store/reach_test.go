package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
)

// TestIsUnreachableTellsALostDatabaseFromARefusal: mode 83. Only an error
// without an answer, or an answer saying the server takes no work now,
// is the database out of reach; a lock or statement timeout, a
// constraint or a serialization failure is an answer (wrapped or not).
func TestIsUnreachableTellsALostDatabaseFromARefusal(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("advance named runs: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no answer", errors.New("read tcp: connection reset by peer"), true},
		{"a context that ended", fmt.Errorf("begin: %w", context.DeadlineExceeded), true},
		{"connection exception", pg("08006"), true},
		{"admin shutdown", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"starting up", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"lock timeout", pg("55P03"), false},
		{"statement timeout", pg("57014"), false},
		{"serialization failure", pg("40001"), false},
		{"deadlock", pg("40P01"), false},
		{"unique violation", pg("23505"), false},
	} {
		if got := store.IsUnreachable(tc.err); got != tc.want {
			t.Errorf("%s: IsUnreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
