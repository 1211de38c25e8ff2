package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// ParseID checks the form of id, a run or task id (kind): a whole UUID in
// any form uuid.Parse takes, or a prefix of one of at least
// core.IDPrefixMinDefault hex digits (without dashes, or with them in
// their canonical places), surrounding space ignored. It reads nothing.
// Errors (ErrInvalidInput): a malformed id, and the nil UUID, which names
// nothing and never stands for "any".
func ParseID(kind store.IDKind, id string) (core.IDPrefix, error) {
	p, err := core.ParseIDPrefix(id)
	if err != nil {
		return core.IDPrefix{}, invalid("malformed %s id %q: want a UUID such as 0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10, or a unique prefix of at least %d hex digits such as 0b7c6d2e",
			kind, id, core.IDPrefixMinDefault)
	}
	if p.Whole() && p.Lo == uuid.Nil {
		return core.IDPrefix{}, invalid("%s id %q is the nil UUID, which names no %s", kind, id, kind)
	}
	return p, nil
}

// ResolveID returns the one id of kind that id (see ParseID) names.
// Errors: ErrInvalidInput for a malformed id, a prefix that matches two or
// more ids of kind (naming two), or one that names no id of kind but one
// of the other (a run id given for a task); ErrNotFound when it names
// nothing; the database's.
func (c *Client) ResolveID(ctx context.Context, kind store.IDKind, id string) (uuid.UUID, error) {
	p, err := ParseID(kind, id)
	if err != nil {
		return uuid.Nil, err
	}
	got, err := c.s.ResolveID(ctx, kind, p)
	return got, mapError(err)
}

// ResolveIDs resolves each of ids to one id of kind (ResolveID), repeats
// dropped, in the order first given. Errors: the first of ResolveID's
// other than ErrNotFound; else ErrNotFound naming every id that names
// nothing ("task 5738d6, 0b7c6d2e: not found").
func (c *Client) ResolveIDs(ctx context.Context, kind store.IDKind, ids []string) ([]uuid.UUID, error) {
	seen := map[uuid.UUID]bool{}
	var out []uuid.UUID
	var missing []string
	for _, id := range ids {
		tid, err := c.ResolveID(ctx, kind, id)
		switch {
		case errors.Is(err, ErrNotFound):
			missing = append(missing, strings.TrimSpace(id))
			continue
		case err != nil:
			return nil, err
		}
		if !seen[tid] {
			seen[tid] = true
			out = append(out, tid)
		}
	}
	if len(missing) > 0 {
		return nil, mapError(fmt.Errorf("%s %s: %w", kind, strings.Join(missing, ", "), store.ErrNotFound))
	}
	return out, nil
}

// lookup reads what id (of kind) names with read, resolving id first,
// except a whole UUID, which read is given at once (one query fewer) and
// resolved only when read finds nothing, so that its error says what the
// id is (a run id given for a task) as ResolveID does. read's ErrNotFound
// (store.ErrNotFound) is what says it found nothing.
func lookup[T any](ctx context.Context, c *Client, kind store.IDKind, id string, read func(uuid.UUID) (T, error)) (T, error) {
	var zero T
	p, err := ParseID(kind, id)
	if err != nil {
		return zero, err
	}
	if p.Whole() {
		v, err := read(p.Lo)
		if !errors.Is(err, store.ErrNotFound) {
			return v, mapError(err)
		}
	}
	got, err := c.s.ResolveID(ctx, kind, p)
	if err != nil {
		return zero, mapError(err)
	}
	v, err := read(got)
	return v, mapError(err)
}
