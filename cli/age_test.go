package cli

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration // 0: an error is wanted
	}{
		{"3d", 72 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{" 2d30m ", 48*time.Hour + 30*time.Minute},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"0d", 0},
		{"0s", 0},
		{"-1h", 0},
		{"-1d", 0},
		{"1d-2h", 0},
		{"1d+2h", 0},
		{"d", 0},
		{"3days", 0},
		{"1h1d", 0},
		{"1e2d", 0},
		{"", 0},
		{"999999d", 0},
	} {
		got, err := parseAge(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("parseAge(%q) = %s, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseAge(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
