package core_test

import (
	"errors"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestParseIDPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		lo, hi string // "" means an error is wanted
	}{
		{"5738d667", "5738d667-0000-0000-0000-000000000000", "5738d667-ffff-ffff-ffff-ffffffffffff"},
		{" 5738D6 ", "5738d600-0000-0000-0000-000000000000", "5738d6ff-ffff-ffff-ffff-ffffffffffff"},
		{"5738d667-", "5738d667-0000-0000-0000-000000000000", "5738d667-ffff-ffff-ffff-ffffffffffff"},
		{"5738d667-0b7c-4", "5738d667-0b7c-4000-0000-000000000000", "5738d667-0b7c-4fff-ffff-ffffffffffff"},
		{"5738d6670b7c4", "5738d667-0b7c-4000-0000-000000000000", "5738d667-0b7c-4fff-ffff-ffffffffffff"},
		{"5738d667-0b7c-4c7e-9d55-3f1f8e2b7a10", "5738d667-0b7c-4c7e-9d55-3f1f8e2b7a10", "5738d667-0b7c-4c7e-9d55-3f1f8e2b7a10"},
		{"5738d", "", ""},         // too short
		{"5738d6g7", "", ""},      // not hex
		{"5738d-667", "", ""},     // a dash out of place
		{"5738d6670-b7c", "", ""}, // a digit where a dash belongs
		{"", "", ""},              // empty
		{"5738d667-0b7c-4c7e-9d55-3f1f8e2b7a10f", "", ""}, // too long
	} {
		p, err := core.ParseIDPrefix(tc.in)
		if tc.lo == "" {
			if !errors.Is(err, core.ErrBadIDPrefix) {
				t.Errorf("ParseIDPrefix(%q) = %v, %v; want ErrBadIDPrefix", tc.in, p, err)
			}
			continue
		}
		if err != nil || p.Lo.String() != tc.lo || p.Hi.String() != tc.hi {
			t.Errorf("ParseIDPrefix(%q) = [%s, %s], %v; want [%s, %s]", tc.in, p.Lo, p.Hi, err, tc.lo, tc.hi)
		}
	}
}
