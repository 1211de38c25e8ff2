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
// wraps ErrBadParams and says what is wrong; the store's Trigger refuses
// such a key with it before writing anything, and the CLI before it
// connects.
func ValidateIdempotencyKey(k string) error {
	switch {
	case len(k) > MaxIdempotencyKeyBytes:
		return fmt.Errorf("%w: idempotency key is %d bytes, more than %d", ErrBadParams, len(k), MaxIdempotencyKeyBytes)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: idempotency key is not valid UTF-8", ErrBadParams)
	case strings.ContainsRune(k, 0):
		return fmt.Errorf("%w: idempotency key contains a NUL character", ErrBadParams)
	}
	return nil
}
