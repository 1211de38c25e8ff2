package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/cli"
)

// TestDaemonRefusesABadIDOrEnvPassAtStart: a --id the broker cannot take
// as a consumer tag (over 255 bytes) made the worker retry "connect to
// broker" for ever; now it, an id with control or bidi characters, and a
// --shell-env-pass naming the worker's own secrets exit 2 at once, before
// anything is reached. Against a real database and broker, so that the
// old behaviour (running on) shows as the timeout.
func TestDaemonRefusesABadIDOrEnvPassAtStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	amqpURL := testAMQPURL()
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"id over 255 bytes", []string{"--id", strings.Repeat("w", 256)}, []string{"--id", "256 bytes", "at most 255"}},
		{"id of 128 two-byte runes", []string{"--id", strings.Repeat("é", 128)}, []string{"--id", "at most 255"}},
		{"id with a newline", []string{"--id", "w1\nforged"}, []string{"--id", "U+000A"}},
		{"id with a bidi override", []string{"--id", "w\u202e1"}, []string{"--id", "U+202E"}},
		{"env pass of the database URL", []string{"--allow-shell", "--shell-env-pass", "FLOWFORGE_DATABASE_URL"}, []string{"--shell-env-pass", "never reach a task"}},
		{"env pass of PGPASSWORD", []string{"--allow-shell", "--shell-env-pass", "HTTPS_PROXY", "--shell-env-pass", "PGPASSWORD"}, []string{"--shell-env-pass", "PGPASSWORD"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
			defer cancel()
			args := append([]string{"ffctl", "--database-url", h.url, "daemon", "worker", "--amqp-url", amqpURL, "--health-addr", ""}, c.args...)
			var out, errOut bytes.Buffer
			start := time.Now()
			code := cli.Run(ctx, args, nil, strings.NewReader(""), &out, &errOut)
			r := result{code: code, stdout: out.String(), stderr: errOut.String()}
			if ctx.Err() != nil {
				t.Fatalf("the daemon ran until the test's deadline instead of refusing at start:\n%s", r)
			}
			expect(t, r, 2, c.want...)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("refused only after %s", d)
			}
		})
	}
}
