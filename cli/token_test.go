package cli_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/auth"
)

// TestTokenCreatePrintsTheSecretOnceAndRevokeIsAudited: create prints the
// secret alone on stdout (a script takes it with $(...)), which list never
// shows; revoke records who and why; bad input exits 2, a name taken or
// unknown exits 1, each writing nothing.
func TestTokenCreatePrintsTheSecretOnceAndRevokeIsAudited(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.must("token", "create", "ci", "--role", "operator", "--expires", "90d")
	secret := strings.TrimSpace(r.stdout)
	if _, err := auth.KeyIDOf(secret); err != nil || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stderr, "shown this once") {
		t.Fatalf("create: %s", r)
	}
	list := h.must("token", "list", "-o", "json")
	if strings.Contains(list.stdout, secret[len(auth.SecretPrefix):]) || !strings.Contains(list.stdout, `"role": "operator"`) || !strings.Contains(list.stdout, `"expires_at": "`) {
		t.Fatalf("list: %s", list)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"token", "create", "x", "--role", "root"}, 2, `--role: invalid token: role "root": want viewer, operator or admin`},
		{[]string{"token", "create", "x"}, 2, "--role"},
		{[]string{"token", "create", "Bad Name", "--role", "viewer"}, 2, "must match"},
		{[]string{"token", "create", "x", "--role", "viewer", "--expires", "soon"}, 2, "--expires"},
		{[]string{"token", "create", "ci", "--role", "viewer"}, 1, "names are never reused"},
		{[]string{"token", "revoke", "ci"}, 2, "--reason is required"},
		{[]string{"token", "revoke", "nobody", "--reason", "r"}, 1, "not found"},
	} {
		if r := h.ff(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("ffctl %v: %s, want exit %d naming %q", c.args, r, c.code, c.want)
		}
	}
	h.must("token", "revoke", "ci", "--reason", "leaked in a log")
	list = h.must("token", "list")
	if !strings.Contains(list.stdout, "revoked") || !strings.Contains(list.stdout, "leaked in a log") || !strings.Contains(list.stdout, "cli:") {
		t.Fatalf("list after the revoke: %s", list)
	}
	if r := h.ff("token", "revoke", "ci", "--reason", "again"); r.code != 1 || !strings.Contains(r.stderr, "revoked already") {
		t.Fatalf("second revoke: %s", r)
	}
}

// TestDaemonAPIRefusesAnonymousAccessBeyondLoopback: `daemon api
// --insecure-no-auth` on an address that is not loopback exits 2 naming
// the flag before anything is reached, as does a certificate without its
// key; a worker's flag is named as such.
func TestDaemonAPIRefusesAnonymousAccessBeyondLoopback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"api", "--health-addr", "", "--listen", "0.0.0.0:8090", "--insecure-no-auth"}, "api: --insecure-no-auth 0.0.0.0:8090 (Config.InsecureNoAuth): must be used only on a loopback address"},
		{[]string{"all", "--health-addr", "", "--api-listen", "[::]:8090", "--insecure-no-auth"}, "--insecure-no-auth"},
		{[]string{"api", "--health-addr", "", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{[]string{"api", "--allow-shell"}, "--allow-shell is a flag of daemon worker and daemon all, not of daemon api"},
		{[]string{"worker", "--listen", "127.0.0.1:1"}, "--listen is a flag of daemon api, not of daemon worker"},
	} {
		if r := ffDaemon(t, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("ffctl daemon %v: %s, want exit 2 naming %q", c.args, r, c.want)
		}
	}
}
