package core

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIdempotencyKeyBytes bounds a trigger's idempotency key (the run's,
// not a task's: see StoredIdempotencyKey for those).
const MaxIdempotencyKeyBytes = 512

// ValidateIdempotencyKey checks a trigger's idempotency key ("" is no key):
// at most MaxIdempotencyKeyBytes, valid UTF-8, no NUL character. The error
// says "invalid idempotency key: " and what is wrong, and matches
// ErrBadParams (errors.Is), the class of a trigger's bad input; the
// store's Trigger refuses such a key with it before writing anything, and
// the CLI before it connects.
func ValidateIdempotencyKey(k string) error {
	switch {
	case len(k) > MaxIdempotencyKeyBytes:
		return &idempotencyKeyError{fmt.Sprintf("%d bytes, more than the limit of %d bytes", len(k), MaxIdempotencyKeyBytes)}
	case !utf8.ValidString(k):
		return &idempotencyKeyError{"not valid UTF-8"}
	case strings.ContainsRune(k, 0):
		return &idempotencyKeyError{"contains a NUL character"}
	}
	return nil
}

// idempotencyKeyError is ValidateIdempotencyKey's refusal: a bad input of
// a trigger (it matches ErrBadParams) that names the key, not the params.
type idempotencyKeyError struct{ reason string }

func (e *idempotencyKeyError) Error() string { return "invalid idempotency key: " + e.reason }

// Is makes the refusal match ErrBadParams, so every caller that maps a
// trigger's bad input (exit 2, nothing written) maps this one too.
func (e *idempotencyKeyError) Is(target error) bool { return target == ErrBadParams }
