package cli_test

import (
	"strings"
	"testing"
)

// TestRetentionFlagsThatDoNotParseAreUsageErrors: each retention age is
// an age (Go duration or days); anything else is exit 2 naming the flag.
func TestRetentionFlagsThatDoNotParseAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ role, flag, value, want string }{
		{"scheduler", "retain-succeeded", "soon", `ffctl: --retain-succeeded: "soon": want a duration such as 3d, 1d12h, 90m or 1h30m` + "\n"},
		{"all", "retain-cancelled", "-1d", `ffctl: --retain-cancelled: "-1d": want a duration such as 3d, 1d12h, 90m or 1h30m` + "\n"},
		{"scheduler", "retain-succeeded", " ", "ffctl: --retain-succeeded is empty: give an age such as 7d or 36h, or 0 for the default\n"},
		{"all", "retain-outbox", "", "ffctl: --retain-outbox is empty: give an age such as 7d or 36h, or 0 for the default\n"},
		{"scheduler", "prune-interval", "often", "invalid value \"often\" for flag --prune-interval"},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			r := ffDaemon(t, tc.role, "--health-addr", "", "--"+tc.flag, tc.value)
			if tc.flag == "prune-interval" {
				expect(t, r, 2, tc.want)
				return
			}
			if r.code != 2 || r.stderr != tc.want {
				t.Fatalf("%s\nwant exit 2 and stderr %q", r, tc.want)
			}
		})
	}
}

// TestRetentionAgesOfZeroAreTheirDefaults: 0, however spelt ("0d" and
// "0s" were refused as not positive: a trial finding), is each age's
// default (for --retain-dead: off), as for every count and duration of
// ffctl's flags; the daemon gets past them to the next setting's bound
// (here a prune interval that busy-loops the database), which it names.
func TestRetentionAgesOfZeroAreTheirDefaults(t *testing.T) {
	t.Parallel()
	for _, zero := range []string{"0", "0d", "0s", "0h0m"} {
		t.Run(zero, func(t *testing.T) {
			t.Parallel()
			r := ffDaemon(t, "scheduler", "--health-addr", "", "--retain-succeeded", zero, "--retain-cancelled", zero, "--retain-dead", zero, "--retain-outbox", zero, "--prune-interval", "1ms")
			expect(t, r, 2, "--prune-interval 1ms")
			if strings.Contains(r.stderr, "retain") {
				t.Fatalf("a retention age of %s was refused: %s", zero, r)
			}
		})
	}
}
