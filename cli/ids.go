package cli

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// parseID checks the form of an id argument of kind what: a whole UUID, or
// a prefix of one of at least core.IDPrefixMinDefault hex digits (the
// dashboard shows eight). A malformed one, and the nil UUID (which names
// nothing and must never stand for "any"), are usage errors. resolveID
// turns the result into an id.
func parseID(what store.IDKind, s string) (core.IDPrefix, error) {
	p, err := core.ParseIDPrefix(s)
	if err != nil {
		return core.IDPrefix{}, usageError("malformed %s id %q: want a UUID such as 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10, or a unique prefix of at least %d hex digits such as 0b7c6d2e",
			what, s, core.IDPrefixMinDefault)
	}
	if p.Whole() && p.Lo == uuid.Nil {
		return core.IDPrefix{}, usageError("%s id %q is the nil UUID, which names no %s", what, s, what)
	}
	return p, nil
}

// resolveID returns the one id of kind what that p names (see
// store.ResolveID). Errors: a prefix matching two or more ids, or naming
// an id of the other kind (a run id given to `task show`), is bad input
// (exit 2); an id that names nothing is not found (exit 1).
func resolveID(ctx context.Context, s *store.Store, what store.IDKind, p core.IDPrefix) (uuid.UUID, error) {
	id, err := s.ResolveID(ctx, what, p)
	var amb *store.AmbiguousIDError
	var wrong *store.WrongKindError
	switch {
	case err == nil:
		return id, nil
	case errors.As(err, &amb), errors.As(err, &wrong):
		return uuid.Nil, &ExitError{Code: ExitBadUsage, Err: err}
	}
	return uuid.Nil, failure(err)
}

// oneID checks that c has exactly one argument, an id of kind what (see
// parseID).
func oneID(c *cli.Context, what store.IDKind) (core.IDPrefix, error) {
	if c.NArg() != 1 {
		return core.IDPrefix{}, usageError("expected exactly one %s id", what)
	}
	return parseID(what, strings.TrimSpace(c.Args().First()))
}
