package cli_test

import "testing"

// TestRetentionFlagsThatDoNotParseAreUsageErrors: each retention age is
// an age (Go duration or days); anything else is exit 2 naming the flag.
func TestRetentionFlagsThatDoNotParseAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ role, flag, value, want string }{
		{"scheduler", "retain-succeeded", "soon", `ffctl: --retain-succeeded: "soon": want a duration such as 3d, 1d12h, 90m or 1h30m` + "\n"},
		{"all", "retain-cancelled", "-1d", `ffctl: --retain-cancelled: "-1d": want a duration such as 3d, 1d12h, 90m or 1h30m` + "\n"},
		{"scheduler", "retain-dead", "0", `ffctl: --retain-dead: "0": must be positive` + "\n"},
		{"all", "retain-outbox", "", `ffctl: --retain-outbox: "": must be positive` + "\n"},
		{"scheduler", "prune-interval", "often", "invalid value \"often\" for flag -prune-interval"},
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
