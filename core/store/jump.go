package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// ErrAmbiguous is returned (wrapped) by FindByIDPrefix when an id prefix
// matches more than one run or task.
var ErrAmbiguous = errors.New("ambiguous id prefix")

// IDMatch is a run or task whose id FindByIDPrefix matched.
type IDMatch struct {
	// Kind is "run" or "task".
	Kind string
	ID   uuid.UUID
}

// FindByIDPrefix resolves ref, a full run or task id or a prefix of one (see
// core.ParseIDPrefix), to the one run or task it names, whichever kind it is: the
// dashboard's jump. It uses ResolveID's primary-key range look-ups. Errors:
// one wrapping core.ErrBadIDPrefix for a malformed ref, ErrNotFound when nothing
// matches, ErrAmbiguous (naming the matches) when more than one does.
func (s *Store) FindByIDPrefix(ctx context.Context, ref string) (IDMatch, error) {
	p, err := core.ParseIDPrefix(ref)
	if err != nil {
		return IDMatch{}, err
	}
	var found []IDMatch
	for _, k := range []IDKind{IDRun, IDTask} {
		ids, err := s.matchIDs(ctx, k, p)
		if err != nil {
			return IDMatch{}, err
		}
		for _, id := range ids {
			found = append(found, IDMatch{Kind: string(k), ID: id})
		}
	}
	switch len(found) {
	case 0:
		return IDMatch{}, fmt.Errorf("no run or task id starts with %s: %w", p.Text, ErrNotFound)
	case 1:
		return found[0], nil
	}
	names := make([]string, 0, len(found))
	for _, m := range found {
		names = append(names, m.Kind+" "+m.ID.String())
	}
	return IDMatch{}, fmt.Errorf("%s matches %s: %w", p.Text, strings.Join(names, ", "), ErrAmbiguous)
}
