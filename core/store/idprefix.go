package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// IDKind names the table an id belongs to.
type IDKind string

// The kinds of id an operator passes on a command line.
const (
	IDRun  IDKind = "run"  // workflow_runs.id
	IDTask IDKind = "task" // task_runs.id
)

// AmbiguousIDError: an id prefix matches more than one id of the kind
// wanted. Candidates holds two of them (the look-up stops at two).
type AmbiguousIDError struct {
	Kind       IDKind
	Prefix     string
	Candidates []uuid.UUID
}

func (e *AmbiguousIDError) Error() string {
	c := make([]string, len(e.Candidates))
	for i, id := range e.Candidates {
		c[i] = id.String()
	}
	return fmt.Sprintf("%s id prefix %s is ambiguous: it matches %s and maybe more (give more characters)", e.Kind, e.Prefix, strings.Join(c, ", "))
}

// WrongKindError: an id (or prefix) names no id of the kind wanted but
// exactly one of another kind, such as a run id passed to `task show`.
type WrongKindError struct {
	Prefix string
	Want   IDKind
	Got    IDKind
	ID     uuid.UUID // the id of kind Got it names
}

func (e *WrongKindError) Error() string {
	return fmt.Sprintf("%s is a %s id, not a %s id (ffctl %s show %s)", e.Prefix, e.Got, e.Want, e.Got, e.ID)
}

// qMatchIDs select the ids of each kind in a prefix's range; BETWEEN on the
// primary key is an index range scan (idprefix_test.go EXPLAINs them), and
// LIMIT 2 is enough to tell one from many.
const (
	qMatchRunIDs  = `SELECT id FROM workflow_runs WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 2`
	qMatchTaskIDs = `SELECT id FROM task_runs WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 2`
)

func matchQuery(k IDKind) string {
	if k == IDTask {
		return qMatchTaskIDs
	}
	return qMatchRunIDs
}

// ResolveID returns the one id of kind want that p covers. Errors: an
// *AmbiguousIDError when p covers two or more of them; a *WrongKindError
// when it covers none but exactly one id of the other kind; ErrNotFound
// (wrapped, naming the prefix) when it covers neither; a database error
// otherwise.
func (s *Store) ResolveID(ctx context.Context, want IDKind, p core.IDPrefix) (uuid.UUID, error) {
	ids, err := s.matchIDs(ctx, want, p)
	if err != nil {
		return uuid.Nil, err
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 2:
		return uuid.Nil, &AmbiguousIDError{Kind: want, Prefix: p.Text, Candidates: ids}
	}
	other := IDRun
	if want == IDRun {
		other = IDTask
	}
	ids, err = s.matchIDs(ctx, other, p)
	if err != nil {
		return uuid.Nil, err
	}
	if len(ids) == 1 {
		return uuid.Nil, &WrongKindError{Prefix: p.Text, Want: want, Got: other, ID: ids[0]}
	}
	return uuid.Nil, fmt.Errorf("%s %s: %w", want, p.Text, ErrNotFound)
}

func (s *Store) matchIDs(ctx context.Context, k IDKind, p core.IDPrefix) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	if err := s.db.SelectContext(ctx, &ids, matchQuery(k), p.Lo, p.Hi); err != nil {
		return nil, fmt.Errorf("look up %s id %s: %w", k, p.Text, err)
	}
	return ids, nil
}
