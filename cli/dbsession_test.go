package cli_test

import "testing"

// TestDaemonRefusesBadSessionBounds: a combination of session timeouts
// that would end healthy sessions (an idle-in-transaction timeout below the
// publisher's confirm wait) or never fire is refused at start with exit 2
// and a message naming the flags, before any connection is made.
func TestDaemonRefusesBadSessionBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"idle below the confirm timeout", []string{"daemon", "publisher", "--health-addr", "", "--db-idle-in-transaction-timeout", "8s"}, []string{"--db-idle-in-transaction-timeout", "must be at least 15s", "confirm timeout"}},
		{"lock above statement", []string{"daemon", "scheduler", "--health-addr", "", "--db-statement-timeout", "1s", "--db-lock-timeout", "2s"}, []string{"lock timeout (2s) exceeds the statement timeout (1s)"}},
		{"negative", []string{"daemon", "worker", "--health-addr", "", "--db-statement-timeout", "-1s"}, []string{"statement timeout is negative"}},
		{"negative warn threshold", []string{"daemon", "scheduler", "--health-addr", "", "--xmin-horizon-warn", "-1s"}, []string{"--xmin-horizon-warn"}},
		{"negative migrate lock timeout", []string{"migrate", "--lock-timeout", "-1s"}, []string{"--lock-timeout"}},
		{"negative migrate retries", []string{"migrate", "--lock-retries", "-1"}, []string{"--lock-retries"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, h.ff(tc.args...), 2, tc.want...)
		})
	}
}
