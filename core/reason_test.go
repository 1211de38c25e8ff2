package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestValidateReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason string
		want   string // "" means valid; else a substring of the error
		none   bool   // the error is ErrNoReason
	}{
		{"plain", "upstream API fixed", "", false},
		{"at the limit", strings.Repeat("r", core.MaxReasonBytes), "", false},
		{"multibyte at the limit", strings.Repeat("é", core.MaxReasonBytes/2), "", false},
		{"empty", "", "no reason given", true},
		{"blank", " \t\n", "no reason given", true},
		{"one byte over", strings.Repeat("r", core.MaxReasonBytes+1), "longer than 1024 bytes", false},
		{"multibyte over", strings.Repeat("é", core.MaxReasonBytes/2+1), "1026 bytes", false},
		{"NUL", "a\x00b", "NUL", false},
		{"invalid UTF-8", "a\xffb", "UTF-8", false},
	} {
		err := core.ValidateReason(tc.reason)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrBadReason)):
			t.Errorf("%s: %v, want ErrBadReason saying %q", tc.name, err, tc.want)
		case err != nil && errors.Is(err, core.ErrNoReason) != tc.none:
			t.Errorf("%s: %v: errors.Is(ErrNoReason) = %v, want %v", tc.name, err, !tc.none, tc.none)
		}
	}
}
