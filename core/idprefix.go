package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
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
// exactly the ids that start with the prefix, through the primary key
// (store.ResolveID).
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
