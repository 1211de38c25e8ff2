package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// IDPrefixMinDefault is the shortest id prefix FindByIDPrefix accepts (hex
// digits, hyphens not counted).
const IDPrefixMinDefault = 6

// ErrAmbiguous is returned (wrapped) when an id prefix matches more than
// one run or task.
var ErrAmbiguous = errors.New("ambiguous id prefix")

// IDMatch is a run or task whose id FindByIDPrefix matched.
type IDMatch struct {
	// Kind is "run" or "task".
	Kind string
	ID   uuid.UUID
}

// FindByIDPrefix resolves ref, a full run or task id or a prefix of one of
// at least IDPrefixMinDefault hex digits (hyphens optional), to the one run
// or task it names. Each look-up is a range scan of a primary key. It
// returns a plain error for a malformed ref, one wrapping ErrNotFound when
// nothing matches and one wrapping ErrAmbiguous (naming up to four
// matches) when more than one does.
func (s *Store) FindByIDPrefix(ctx context.Context, ref string) (IDMatch, error) {
	hex := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(ref), "-", ""))
	if len(hex) < IDPrefixMinDefault || len(hex) > 32 || strings.Trim(hex, "0123456789abcdef") != "" {
		return IDMatch{}, fmt.Errorf("%q is not a run or task id or a prefix of at least %d hex digits", ref, IDPrefixMinDefault)
	}
	lo, err := uuid.Parse(hex + strings.Repeat("0", 32-len(hex)))
	if err != nil {
		return IDMatch{}, fmt.Errorf("id prefix %q: %w", ref, err)
	}
	hi, err := uuid.Parse(hex + strings.Repeat("f", 32-len(hex)))
	if err != nil {
		return IDMatch{}, fmt.Errorf("id prefix %q: %w", ref, err)
	}
	var rows []struct {
		Kind string    `db:"kind"`
		ID   uuid.UUID `db:"id"`
	}
	err = s.db.SelectContext(ctx, &rows, `
(SELECT 'run' AS kind, id FROM workflow_runs WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 4)
UNION ALL
(SELECT 'task' AS kind, id FROM task_runs WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 4)`, lo, hi)
	if err != nil {
		return IDMatch{}, fmt.Errorf("look up id prefix %s: %w", hex, err)
	}
	switch len(rows) {
	case 0:
		return IDMatch{}, fmt.Errorf("no run or task id starts with %s: %w", hex, ErrNotFound)
	case 1:
		return IDMatch{Kind: rows[0].Kind, ID: rows[0].ID}, nil
	}
	names := make([]string, 0, len(rows))
	for _, r := range rows[:min(len(rows), 4)] {
		names = append(names, r.Kind+" "+r.ID.String())
	}
	return IDMatch{}, fmt.Errorf("%s matches %s: %w", hex, strings.Join(names, ", "), ErrAmbiguous)
}
