package handlers_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/handlers"
)

// shellEnvOf runs `env` through h and returns the command's environment.
func shellEnvOf(t *testing.T, h core.Handler, params string) map[string]string {
	t.Helper()
	out, err := h(context.Background(), task(params, 1))
	if err != nil {
		t.Fatal(err)
	}
	var res handlers.ShellResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return env
}

// TestShellDoesNotLeakTheWorkersEnvironment is the reported leak: the
// default shell handler, in a worker started with FLOWFORGE_DATABASE_URL,
// ran `env` and printed the password into the run's result.
func TestShellDoesNotLeakTheWorkersEnvironment(t *testing.T) {
	t.Setenv("FLOWFORGE_DATABASE_URL", "postgres://worker:s3cret-db@db/flowforge")
	t.Setenv("FLOWFORGE_AMQP_URL", "amqp://worker:s3cret-mq@mq/")
	t.Setenv("PGPASSWORD", "s3cret-pg")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws")
	out, err := handlers.Shell(context.Background(), task(`{"command": ["env"]}`, 1))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cret") {
		t.Fatalf("a worker secret reached the task's result: %s", out)
	}
	if !strings.Contains(string(out), "FLOWFORGE_TASK_RUN_ID=task-1") || !strings.Contains(string(out), "PATH=") {
		t.Fatalf("the task's own variables or PATH are missing: %s", out)
	}
}

// TestShellEnvironmentIsMinimalAndExplicit: with an injected worker
// environment, a command sees exactly the base set, the names passed, its
// task's variables and params.env; never FLOWFORGE_* or PG* of the worker,
// even when they are named to be passed.
func TestShellEnvironmentIsMinimalAndExplicit(t *testing.T) {
	worker := map[string]string{
		"PATH": "/opt/tools/bin:/usr/bin:/bin", "HOME": "/home/ff", "LANG": "C.UTF-8", "LC_TIME": "en_GB.UTF-8", "TZ": "Europe/Berlin",
		"FLOWFORGE_DATABASE_URL": "postgres://worker:s3cret@db/ff", "FLOWFORGE_AMQP_URL": "amqp://worker:s3cret@mq/",
		"PGPASSWORD": "s3cret", "PGHOST": "db", "AWS_SECRET_ACCESS_KEY": "s3cret", "HTTPS_PROXY": "http://proxy:3128",
		"HOSTNAME": "box", "SSH_AUTH_SOCK": "/tmp/agent",
	}
	lookup := func(k string) (string, bool) { v, ok := worker[k]; return v, ok }
	cases := []struct {
		name   string
		pass   []string
		params string
		want   map[string]string // must be present with this value
		absent []string
	}{
		{
			name: "base set only", params: `{"command": ["env"]}`,
			want:   map[string]string{"PATH": "/opt/tools/bin:/usr/bin:/bin", "HOME": "/home/ff", "LANG": "C.UTF-8", "LC_TIME": "en_GB.UTF-8", "TZ": "Europe/Berlin", "FLOWFORGE_RUN_ID": "run-1", "FLOWFORGE_PARAM_DAY": "2026-11-30"},
			absent: []string{"FLOWFORGE_DATABASE_URL", "FLOWFORGE_AMQP_URL", "PGPASSWORD", "PGHOST", "AWS_SECRET_ACCESS_KEY", "HTTPS_PROXY", "HOSTNAME", "SSH_AUTH_SOCK"},
		},
		{
			name: "passed names, refused ones skipped", pass: []string{"HTTPS_PROXY", "AWS_SECRET_ACCESS_KEY", "NOT_SET_ANYWHERE", "PGPASSWORD", "FLOWFORGE_DATABASE_URL"},
			params: `{"command": ["env"]}`,
			want:   map[string]string{"HTTPS_PROXY": "http://proxy:3128", "AWS_SECRET_ACCESS_KEY": "s3cret"},
			absent: []string{"NOT_SET_ANYWHERE", "PGPASSWORD", "FLOWFORGE_DATABASE_URL", "FLOWFORGE_AMQP_URL", "HOSTNAME"},
		},
		{
			name: "params.env wins", params: `{"command": ["env"], "env": {"PATH": "/custom", "MINE": "1"}}`,
			want: map[string]string{"PATH": "/custom", "MINE": "1"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := shellEnvOf(t, handlers.ShellHandler(handlers.ShellOptions{EnvPass: c.pass, LookupEnv: lookup}), c.params)
			for k, v := range c.want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			for _, k := range c.absent {
				if v, ok := env[k]; ok {
					t.Errorf("%s reached the command (%q)", k, v)
				}
			}
			allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_TIME": true, "TZ": true, "PWD": true, "SHLVL": true, "_": true}
			for k := range c.want {
				allowed[k] = true
			}
			var extra []string
			for k := range env {
				if !allowed[k] && !strings.HasPrefix(k, "FLOWFORGE_") {
					extra = append(extra, k)
				}
				if strings.HasPrefix(k, "FLOWFORGE_") && strings.Contains(env[k], "s3cret") {
					t.Errorf("%s carries a worker secret", k)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 {
				t.Errorf("variables beyond the explicit set: %v", extra)
			}
		})
	}
	// No PATH at all in the worker: the safe default.
	none := func(string) (string, bool) { return "", false }
	if env := shellEnvOf(t, handlers.ShellHandler(handlers.ShellOptions{LookupEnv: none}), `{"command": ["/usr/bin/env"]}`); env["PATH"] != handlers.ShellPathDefault {
		t.Errorf("PATH without a worker PATH = %q, want %q", env["PATH"], handlers.ShellPathDefault)
	}
}

func TestCheckShellEnvPassRefusesTheWorkersOwnSettings(t *testing.T) {
	cases := []struct {
		name    string
		wantErr string // "" for accepted
	}{
		{"HTTPS_PROXY", ""},
		{"AWS_PROFILE", ""},
		{"FLOWFORGE_DATABASE_URL", "never reach a task"},
		{"FLOWFORGE_AMQP_URL", "never reach a task"},
		{"flowforge_amqp_url", "never reach a task"},
		{"PGPASSWORD", "never reach a task"},
		{"PGSERVICEFILE", "never reach a task"},
		{"", "not a variable name"},
		{"A=B", "not a variable name"},
	}
	for _, c := range cases {
		err := handlers.CheckShellEnvPass([]string{"OK_NAME", c.name})
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("CheckShellEnvPass(%q) = %v, want %q", c.name, err, c.wantErr)
		}
	}
}
