package cli

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// parseID checks the form of an id argument of kind what: a whole UUID, or
// a prefix of one of at least core.IDPrefixMinDefault hex digits (the
// dashboard shows eight). A malformed one, and the nil UUID (which names
// nothing and must never stand for "any"), are usage errors. resolveID
// turns the result into an id.
func parseID(what store.IDKind, s string) (core.IDPrefix, error) {
	p, err := client.ParseID(what, s)
	if err != nil {
		return core.IDPrefix{}, &ExitError{Code: ExitBadUsage, Err: err}
	}
	return p, nil
}

// resolveID returns the one id of kind what that p names (see
// client.Client.ResolveID). Errors: a prefix matching two or more ids, or
// naming an id of the other kind (a run id given to `task show`), is bad
// input (exit 2); an id that names nothing is not found (exit 1).
func resolveID(ctx context.Context, s *store.Store, what store.IDKind, p core.IDPrefix) (uuid.UUID, error) {
	id, err := client.FromStore(s, client.Options{}).ResolveID(ctx, what, p.Text)
	return id, clientFailure(err)
}

// clientFailure gives an error of the client its exit code: bad input
// (client.ErrInvalidInput) 2, and any other failure 1.
func clientFailure(err error) error {
	if errors.Is(err, client.ErrInvalidInput) {
		return &ExitError{Code: ExitBadUsage, Err: err}
	}
	return failure(err)
}

// oneID checks that c has exactly one argument, an id of kind what (see
// parseID).
func oneID(c *cli.Context, what store.IDKind) (core.IDPrefix, error) {
	if c.NArg() != 1 {
		return core.IDPrefix{}, usageError("expected exactly one %s id", what)
	}
	return parseID(what, strings.TrimSpace(c.Args().First()))
}
