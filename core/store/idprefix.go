package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// IDKind names the table an id belongs to.
type IDKind string

// The kinds of id an operator passes on a command line.
const (
	IDRun  IDKind = "run"  // workflow_runs.id
	IDTask IDKind = "task" // task_runs.id
)

// IDPrefixMinDefault is the fewest hex digits an id prefix may have: the
// dashboard shows eight, and fewer than six would match many ids in a busy
// database.
const IDPrefixMinDefault = 6

// ErrBadIDPrefix: the text is neither a UUID nor a prefix of one (hex
// digits, dashes only in the canonical places, at least IDPrefixMinDefault
// hex digits).
var ErrBadIDPrefix = errors.New("not a UUID or a prefix of one")

// IDPrefix is an id, or the leading part of one, as the range of UUIDs it
// covers: Lo is the prefix padded with 0s, Hi padded with fs (both equal
// for a whole UUID). PostgreSQL orders uuid values by their bytes, which
// is the order of their hex text, so `id BETWEEN Lo AND Hi` selects
// exactly the ids that start with the prefix, through the primary key.
type IDPrefix struct {
	Text   string // as given, trimmed
	Lo, Hi uuid.UUID
}

// Whole reports whether p names one UUID rather than a range.
func (p IDPrefix) Whole() bool { return p.Lo == p.Hi }

// canonicalDashes are the offsets of the dashes in a UUID's 36-character
// text.
var canonicalDashes = [...]int{8, 13, 18, 23}

// ParseIDPrefix parses s (surrounding space ignored, case ignored) as a
// whole UUID in any form uuid.Parse takes, or as a prefix of one: hex
// digits, either without dashes or with dashes exactly where the canonical
// 8-4-4-4-12 form has them, and at least IDPrefixMinDefault hex digits.
// Errors wrap ErrBadIDPrefix.
func ParseIDPrefix(s string) (IDPrefix, error) {
	text := strings.TrimSpace(s)
	if id, err := uuid.Parse(text); err == nil {
		return IDPrefix{Text: text, Lo: id, Hi: id}, nil
	}
	lower := strings.ToLower(text)
	var hex strings.Builder
	dashed := strings.Contains(lower, "-")
	for i, ch := range lower {
		isDashPlace := false
		for _, d := range canonicalDashes {
			isDashPlace = isDashPlace || i == d
		}
		switch {
		case dashed && isDashPlace && ch == '-':
		case (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'):
			if dashed && isDashPlace {
				return IDPrefix{}, fmt.Errorf("%q: %w (a dash belongs at offset %d)", text, ErrBadIDPrefix, i)
			}
			hex.WriteRune(ch)
		default:
			return IDPrefix{}, fmt.Errorf("%q: %w (%q at offset %d)", text, ErrBadIDPrefix, ch, i)
		}
	}
	h := hex.String()
	if len(h) < IDPrefixMinDefault || len(h) > 32 {
		return IDPrefix{}, fmt.Errorf("%q: %w (want %d to 32 hex digits)", text, ErrBadIDPrefix, IDPrefixMinDefault)
	}
	lo, err := uuid.Parse(h + strings.Repeat("0", 32-len(h)))
	if err != nil {
		return IDPrefix{}, fmt.Errorf("%q: %w", text, ErrBadIDPrefix)
	}
	hi, err := uuid.Parse(h + strings.Repeat("f", 32-len(h)))
	if err != nil {
		return IDPrefix{}, fmt.Errorf("%q: %w", text, ErrBadIDPrefix)
	}
	return IDPrefix{Text: text, Lo: lo, Hi: hi}, nil
}

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
func (s *Store) ResolveID(ctx context.Context, want IDKind, p IDPrefix) (uuid.UUID, error) {
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

func (s *Store) matchIDs(ctx context.Context, k IDKind, p IDPrefix) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	if err := s.db.SelectContext(ctx, &ids, matchQuery(k), p.Lo, p.Hi); err != nil {
		return nil, fmt.Errorf("look up %s id %s: %w", k, p.Text, err)
	}
	return ids, nil
}
