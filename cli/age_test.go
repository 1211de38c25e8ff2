package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	t.Parallel()
	const malformed, positive, tooLong = "want a duration such as", "must be positive", "too long: an age is at most 106000 days"
	for _, tc := range []struct {
		in   string
		want time.Duration
		// err is what parseAge's error says ("" for none); parseAgeOrZero
		// says the same except that it takes every zero age.
		err string
	}{
		{"3d", 72 * time.Hour, ""},
		{"1d12h", 36 * time.Hour, ""},
		{"1.5d", 36 * time.Hour, ""},
		{" 2d30m ", 48*time.Hour + 30*time.Minute, ""},
		{"90m", 90 * time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"106000d", 106000 * 24 * time.Hour, ""},
		{"0", 0, positive},
		{"0d", 0, positive},
		{"0s", 0, positive},
		{"0d0h0m", 0, positive},
		{"-1h", 0, malformed},
		{"-1d", 0, malformed},
		{"1d-2h", 0, malformed},
		{"1d+2h", 0, malformed},
		{"d", 0, malformed},
		{"3days", 0, malformed},
		{"1h1d", 0, malformed},
		{"1e2d", 0, malformed},
		{"", 0, malformed},
		{"999999d", 0, tooLong},
		{"99999999d", 0, tooLong},
		{"106000d1h", 0, tooLong},
		{"3000000h", 0, tooLong},
	} {
		got, err := parseAge(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("parseAge(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseAge(%q) = %s, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
		got, err = parseAgeOrZero(tc.in)
		wantErr := tc.err
		if wantErr == positive {
			wantErr = ""
		}
		switch {
		case wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("parseAgeOrZero(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("parseAgeOrZero(%q) = %s, %v; want an error saying %q", tc.in, got, err, wantErr)
		}
	}
}
