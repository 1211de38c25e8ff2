package core

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxReasonBytes bounds the reason of an operator action (1 KiB): it is
// stored in the audit trail with every row the action changes.
const MaxReasonBytes = 1024

var (
	// ErrBadReason is matched (errors.Is) by every error ValidateReason
	// returns.
	ErrBadReason = errors.New("invalid reason")
	// ErrNoReason is matched by the error ValidateReason returns for an
	// empty or blank reason.
	ErrNoReason = errors.New("no reason given")
)

// ValidateReason checks the audit reason of an operator action (requeue,
// cancel, forget-key, outbox retry and drop): not blank, at most
// MaxReasonBytes, valid UTF-8 and free of the NUL character (PostgreSQL text
// refuses both). The error wraps ErrBadReason, and also ErrNoReason when the
// reason is blank; it says what is wrong. Callers trim the reason first if
// they want surrounding blanks gone: it is checked as given.
func ValidateReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("%w: %w (every operator action is audited with one)", ErrBadReason, ErrNoReason)
	case len(reason) > MaxReasonBytes:
		return fmt.Errorf("%w: %d bytes, longer than %d bytes", ErrBadReason, len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return fmt.Errorf("%w: not valid UTF-8", ErrBadReason)
	case strings.ContainsRune(reason, 0):
		return fmt.Errorf("%w: contains a NUL character", ErrBadReason)
	}
	return nil
}
