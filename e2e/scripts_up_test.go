package e2e

// scripts/up on machines unlike this one (issue 11): the Docker path and a
// PostgreSQL that asks for a password. Neither Docker nor a Debian
// postgresql under systemd runs here, so the tests put fakes of `docker`
// and `psql` first on PATH that record their calls: they prove what
// scripts/up asks of the host, not that the real tools then behave.

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// fakeDockerScript answers `docker info` and `docker compose ... up` with
// success and plays psql inside the compose container ("SELECT 1" prints 1,
// the database does not exist yet); every call is appended to $FAKE_LOG.
const fakeDockerScript = `#!/bin/sh
echo "docker $*" >> "$FAKE_LOG"
case "$*" in
info*) exit 0 ;;
*" up "*) exit 0 ;;
*"exec -T postgres psql"*"SELECT 1 FROM pg_database"*) exit 0 ;;
*"exec -T postgres psql"*"SELECT 1"*) echo 1; exit 0 ;;
*"exec -T postgres psql"*) exit 0 ;;
*"exec -T rabbitmq"*) exit 0 ;;
esac
echo "fake docker: unexpected call: $*" >&2
exit 3
`

// fakePsqlScript records its call and fails as $FAKE_PSQL_ERR says.
const fakePsqlScript = `#!/bin/sh
echo "host psql $*" >> "$FAKE_LOG"
echo "$FAKE_PSQL_ERR" >&2
exit 2
`

// runScriptsUp runs ../scripts/up with the fakes first on PATH, a private
// state directory and env; it returns the combined output, the exit code
// and the fakes' call log.
func runScriptsUp(t *testing.T, env ...string) (out string, code int, calls string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"docker": fakeDockerScript, "psql": fakePsqlScript} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(dir, "calls.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "scripts", "up"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_LOG="+logPath,
		"FLOWFORGE_STATE_DIR="+filepath.Join(dir, "state"), "FLOWFORGE_COMPOSE_PROJECT=fftest", "FLOWFORGE_NO_DOCKER=",
		"FLOWFORGE_AMQP_URL="+harness.TestAMQPURL()) // a broker that answers: only PostgreSQL is in question
	cmd.Env = append(cmd.Env, env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(logPath)
	return b.String(), code, string(c)
}

// TestScriptsUpDockerPathNeedsNoHostPsql: where PostgreSQL comes from
// docker compose, scripts/up creates the database through `docker compose
// exec ... psql` in the container. Before, it called the host's psql, which
// a machine with Docker need not have (and with a psql that cannot connect
// it waited 30 s and failed).
func TestScriptsUpDockerPathNeedsNoHostPsql(t *testing.T) {
	port := harness.FreePort(t) // nothing answers: scripts/up must start PostgreSQL (with the fake compose)
	out, code, calls := runScriptsUp(t, fmt.Sprintf("FLOWFORGE_DATABASE_URL=postgres://postgres@127.0.0.1:%d/ffdocker?sslmode=disable", port),
		"FAKE_PSQL_ERR=psql: error: the host psql must not be called on the Docker path")
	if code != 0 {
		t.Fatalf("scripts/up: exit %d\n%s\ncalls:\n%s", code, out, calls)
	}
	if strings.Contains(calls, "host psql") {
		t.Errorf("scripts/up called the host's psql on the Docker path:\n%s", calls)
	}
	for _, want := range []string{"compose -p fftest", " up -d --wait postgres", `exec -T postgres psql -U postgres -d postgres -v ON_ERROR_STOP=1 -X -q -t -A -c CREATE DATABASE "ffdocker"`} {
		if !strings.Contains(calls, want) {
			t.Errorf("no docker call with %q:\n%s", want, calls)
		}
	}
	if !strings.Contains(out, "created database 'ffdocker'") || !strings.Contains(out, "owner: compose (started now)") {
		t.Errorf("scripts/up output:\n%s", out)
	}
}

// TestScriptsUpExplainsAPasswordAskingPostgres: a PostgreSQL that answers
// but refuses the passwordless login (Debian's own cluster, started by the
// package under systemd, asks for a password over TCP) ends scripts/up at
// once with exit 1 and the exact commands to run. Before, it retried for
// 30 s and said only "cannot connect". The server here is the shared test
// PostgreSQL; the refusal comes from the fake psql.
func TestScriptsUpExplainsAPasswordAskingPostgres(t *testing.T) {
	host, port := "127.0.0.1", "5432"
	if u, err := url.Parse(os.Getenv("FLOWFORGE_TEST_DATABASE_URL")); err == nil && u.Hostname() != "" {
		host, port = u.Hostname(), u.Port()
	}
	cases := []struct {
		name, userinfo, psqlErr string
		want                    []string
	}{
		{"no password in the URL", "postgres",
			`psql: error: connection to server at "127.0.0.1", port 5432 failed: fe_sendauth: no password supplied`,
			[]string{"fe_sendauth: no password supplied", "127.0.0.1:15432/ffauth", "scripts/up", `ALTER ROLE postgres PASSWORD 'choose-one'`, "postgres://postgres:choose-one@"}},
		{"a wrong password in the URL", "postgres:wrong",
			`psql: error: connection to server at "127.0.0.1", port 5432 failed: FATAL:  password authentication failed for user "postgres"`,
			[]string{"password authentication failed", "The password in FLOWFORGE_DATABASE_URL is refused", "ALTER ROLE postgres PASSWORD"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, code, calls := runScriptsUp(t, fmt.Sprintf("FLOWFORGE_DATABASE_URL=postgres://%s@%s:%s/ffauth?sslmode=disable", c.userinfo, host, port),
				"FAKE_PSQL_ERR="+c.psqlErr)
			took := time.Since(start)
			if code != 1 {
				t.Fatalf("scripts/up: exit %d, want 1\n%s", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
			if n := strings.Count(calls, "host psql"); n != 1 || took > 20*time.Second {
				t.Errorf("psql called %d times over %v: a refused login should end the wait at once\n%s", n, took, calls)
			}
		})
	}
}
