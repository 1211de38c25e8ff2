package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestValidateIdempotencyKey: a trigger's key is refused over
// MaxIdempotencyKeyBytes, as invalid UTF-8 or with a NUL, each with an
// error that says "invalid idempotency key" and which, matching
// core.ErrBadParams (never "invalid params": the params are fine); every other key
// (none, the longest allowed, any valid text) passes.
func TestValidateIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key string
		want      string // "": accepted
	}{
		{"none", "", ""},
		{"plain", "nightly-2026-01-01", ""},
		{"unicode", "día-é-日本", ""},
		{"at the limit", strings.Repeat("k", core.MaxIdempotencyKeyBytes), ""},
		{"one byte over", strings.Repeat("k", core.MaxIdempotencyKeyBytes+1), "invalid idempotency key: 513 bytes, more than the limit of 512 bytes"},
		{"invalid UTF-8", "k-\xff", "invalid idempotency key: not valid UTF-8"},
		{"a multi-byte rune cut", "k-" + "é"[:1], "invalid idempotency key: not valid UTF-8"},
		{"NUL", "k-\x00-d", "invalid idempotency key: contains a NUL character"},
	} {
		err := core.ValidateIdempotencyKey(tc.key)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && (!errors.Is(err, core.ErrBadParams) || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q wrapping core.ErrBadParams", tc.name, err, tc.want)
		}
	}
}
