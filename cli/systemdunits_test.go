package cli_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	ffcli "github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/daemon/worker"
)

// The systemd units of deploy/systemd: one per daemon role (and one for
// `daemon all`), each read by a small parser and held to what running a
// daemon under systemd needs; `systemd-analyze verify` reads them too
// where it is installed.

// unitsDir holds the units, seen from the cli package's directory.
const unitsDir = "../deploy/systemd"

// unitRoles are the roles a unit is shipped for: flowforge-ROLE.service.
var unitRoles = []supervisor.Role{supervisor.RoleScheduler, supervisor.RolePublisher, supervisor.RoleWorker, supervisor.RoleAll}

// unitStopMargin is how much longer than the daemon's own bounded stop
// (--stop-timeout) systemd must wait before its SIGKILL: after the bound
// the worker still aborts its handlers, waits up to --abort-grace for
// those that ignore it, and records their outcomes.
const unitStopMargin = worker.AbortGraceDefault

// unitFfctl is the binary every unit runs (make install as root, and the
// Dockerfile, put it there).
const unitFfctl = "/usr/local/bin/ffctl"

// unit is a parsed unit file: section -> key -> its values in order (a
// key may repeat: Wants=, ExecStart=).
type unit map[string]map[string][]string

// unitSections are the sections a service unit of ours may have.
var unitSections = []string{"Unit", "Service", "Install"}

// parseUnit reads a unit file as systemd does for the syntax we use:
// "[Section]" lines, "Key=Value" lines (spaces around both trimmed), lines
// ending in a backslash continued on the next, and # or ; comments. It
// returns a problem for a key outside a section, a line that is neither,
// and a section other than unitSections.
func parseUnit(name, text string) (unit, []string) {
	u := unit{}
	var problems []string
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		n, line := i+1, strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if !slices.Contains(unitSections, section) {
				problems = append(problems, fmt.Sprintf("%s:%d: unexpected section [%s]", name, n, section))
			}
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		case !strings.Contains(line, "="):
			problems = append(problems, fmt.Sprintf("%s:%d: neither a [section] nor Key=Value: %q", name, n, line))
		case section == "":
			problems = append(problems, fmt.Sprintf("%s:%d: %q outside a section", name, n, line))
		default:
			k, v, _ := strings.Cut(line, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			u[section][k] = append(u[section][k], v)
		}
	}
	return u, problems
}

// last is the value of key in section that counts (the last one), or "".
func (u unit) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// words is every space-separated word of every value of key in section.
func (u unit) words(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

// parseTimeSpan parses a systemd time span: "45", "45s", "1min 30s",
// "1m30s", "500ms", "2h". It returns an error for anything else, "infinity"
// included (the daemon's stop is bounded, so systemd's should be too).
func parseTimeSpan(s string) (time.Duration, error) {
	units := map[string]time.Duration{
		"": time.Second, "us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
		"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	}
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, fmt.Errorf("empty time span")
	}
	var total time.Duration
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if i == 0 {
			return 0, fmt.Errorf("time span %q: expected a number at %q", s, rest)
		}
		if i < 0 {
			i = len(rest)
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil {
			return 0, fmt.Errorf("time span %q: %w", s, err)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return r >= '0' && r <= '9' || r == ' ' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("time span %q: unknown unit %q", s, rest[:j])
		}
		total += time.Duration(n) * unit
		rest = strings.TrimLeft(rest[j:], " ")
	}
	return total, nil
}

// checkUnit returns a problem for each rule the unit of role (parsed as u,
// named name) breaks: ordering after the network and the two services
// without requiring them, the flowforge user and environment file, an
// ExecStart that is `ffctl daemon ROLE` as ffctl has it (app), restarts
// that stop at a configuration error, a stop systemd lets the daemon
// bound itself, the hardening and the install target.
func checkUnit(app *cli.App, name string, role supervisor.Role, u unit) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, name+": "+fmt.Sprintf(format, a...)) }
	if u.last("Unit", "Description") == "" {
		bad("[Unit] has no Description=")
	}
	for _, dep := range []string{"network-online.target", "postgresql.service", "rabbitmq-server.service"} {
		for _, key := range []string{"After", "Wants"} {
			if !slices.Contains(u.words("Unit", key), dep) {
				bad("[Unit] %s= does not name %s", key, dep)
			}
		}
	}
	for _, key := range []string{"Requires", "Requisite", "BindsTo"} {
		for _, dep := range u.words("Unit", key) {
			if dep == "postgresql.service" || dep == "rabbitmq-server.service" {
				bad("[Unit] %s=%s: the service may run on another host; use Wants=", key, dep)
			}
		}
	}
	want := map[string]string{
		"User": "flowforge", "EnvironmentFile": "/etc/flowforge/flowforge.env",
		"Restart": "on-failure", "KillSignal": "SIGTERM", "KillMode": "mixed",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got := u.last("Service", k); got != want[k] {
			bad("[Service] %s=%q, want %q", k, got, want[k])
		}
	}
	if !slices.Contains(u.words("Service", "RestartPreventExitStatus"), "2") {
		bad("[Service] RestartPreventExitStatus= does not name 2: a configuration error (exit 2) would restart for ever")
	}
	stopBound := supervisor.DefaultStopTimeout
	problems = append(problems, checkExecStart(app, name, role, u, &stopBound)...)
	if d, err := parseTimeSpan(u.last("Service", "TimeoutStopSec")); err != nil {
		bad("[Service] TimeoutStopSec: %v", err)
	} else if d < stopBound+unitStopMargin {
		bad("[Service] TimeoutStopSec=%s is not %s above the daemon's stop timeout %s: systemd's SIGKILL could come before the daemon's own bounded stop", d, unitStopMargin, stopBound)
	}
	if u.last("Install", "WantedBy") != "multi-user.target" {
		bad("[Install] WantedBy=%q, want multi-user.target", u.last("Install", "WantedBy"))
	}
	return problems
}

// checkExecStart checks the unit's one ExecStart: unitFfctl running
// `daemon ROLE` with flags ffctl has, without --allow-shell (a documented
// option, not a default); a --stop-timeout in it replaces *stopBound.
func checkExecStart(app *cli.App, name string, role supervisor.Role, u unit, stopBound *time.Duration) []string {
	var starts []string
	for _, v := range u["Service"]["ExecStart"] {
		if v != "" { // an empty ExecStart= resets the list
			starts = append(starts, v)
		}
	}
	if len(starts) != 1 {
		return []string{fmt.Sprintf("%s: [Service] has %d ExecStart= commands, want 1", name, len(starts))}
	}
	cmds := shellCommands(strings.TrimLeft(starts[0], "-@:+!"))
	if len(cmds) != 1 || len(cmds[0]) < 3 || cmds[0][0].text != unitFfctl || cmds[0][1].text != "daemon" || cmds[0][2].text != string(role) {
		return []string{fmt.Sprintf("%s: ExecStart=%s, want %s daemon %s [flags]", name, starts[0], unitFfctl, role)}
	}
	var problems []string
	if p := checkFfctl(app, cmds[0][1:]); p != "" {
		problems = append(problems, fmt.Sprintf("%s: ExecStart=%s: %s", name, starts[0], p))
	}
	for i, w := range cmds[0] {
		flag, value, hasValue := strings.Cut(w.text, "=")
		switch flag {
		case "--allow-shell":
			problems = append(problems, fmt.Sprintf("%s: ExecStart=%s enables the shell handler; leave it a documented option (FLOWFORGE_ALLOW_SHELL in a drop-in)", name, starts[0]))
		case "--stop-timeout":
			if !hasValue && i+1 < len(cmds[0]) {
				value = cmds[0][i+1].text
			}
			d, err := time.ParseDuration(value)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: ExecStart=%s: --stop-timeout: %v", name, starts[0], err))
				continue
			}
			*stopBound = d
		}
	}
	return problems
}

// unitApp is ffctl's command tree, for the ExecStart checks.
func unitApp() *cli.App {
	return ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
}

// TestSystemdUnitsRunEachRoleAsAService: deploy/systemd holds a unit for
// each daemon role and `daemon all`, and nothing else but the environment
// file's example and the sysusers entry; each unit parses and keeps every
// rule of checkUnit.
func TestSystemdUnitsRunEachRoleAsAService(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(unitsDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"flowforge.env.example", "flowforge.sysusers"}
	for _, r := range unitRoles {
		want = append(want, "flowforge-"+string(r)+".service")
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("deploy/systemd holds %q, want %q", names, want)
	}
	app := unitApp()
	for _, r := range unitRoles {
		name := "flowforge-" + string(r) + ".service"
		b, err := os.ReadFile(filepath.Join(unitsDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		u, problems := parseUnit(name, string(b))
		problems = append(problems, checkUnit(app, name, r, u)...)
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// TestSystemdUnitChecksCatchViolations gives checkUnit and parseUnit the
// worker's unit with one rule broken at a time; each must be named.
func TestSystemdUnitChecksCatchViolations(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(unitsDir, "flowforge-worker.service"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	app := unitApp()
	const name = "flowforge-worker.service"
	for _, tc := range []struct {
		from, to string
		want     string // "" means no problem
	}{
		{"TimeoutStopSec=45s", "TimeoutStopSec=1min 30s", ""},
		{"TimeoutStopSec=45s", "TimeoutStopSec=40", ""},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=\nExecStart=/usr/local/bin/ffctl daemon worker --concurrency 8", ""},
		{"TimeoutStopSec=45s", "TimeoutStopSec=30s", "TimeoutStopSec=30s is not 10s above the daemon's stop timeout 30s"},
		{"TimeoutStopSec=45s", "TimeoutStopSec=infinity", `TimeoutStopSec: time span "infinity": expected a number`},
		{"TimeoutStopSec=45s", "TimeoutStopSec=45 parsecs", `unknown unit "parsecs"`},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/local/bin/ffctl daemon worker --stop-timeout 40s", "TimeoutStopSec=45s is not 10s above the daemon's stop timeout 40s"},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/local/bin/ffctl daemon frobnicate", "want /usr/local/bin/ffctl daemon worker [flags]"},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/local/bin/ffctl daemon worker --concurency 8", `"--concurency": ffctl daemon worker has no flag --concurency`},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/local/bin/ffctl daemon worker --allow-shell", "enables the shell handler"},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/local/bin/ffctl daemon worker\nExecStart=/usr/local/bin/ffctl version", "has 2 ExecStart= commands, want 1"},
		{"ExecStart=/usr/local/bin/ffctl daemon worker", "ExecStart=/usr/bin/ffctl daemon worker", "want /usr/local/bin/ffctl daemon worker"},
		{"RestartPreventExitStatus=2", "", "RestartPreventExitStatus= does not name 2"},
		{"KillMode=mixed", "KillMode=control-group", `KillMode="control-group", want "mixed"`},
		{"Restart=on-failure", "Restart=always", `Restart="always", want "on-failure"`},
		{"User=flowforge", "", `User="", want "flowforge"`},
		{"Wants=network-online.target postgresql.service rabbitmq-server.service", "Requires=network-online.target postgresql.service rabbitmq-server.service", "Requires=postgresql.service: the service may run on another host; use Wants="},
		{"After=network-online.target postgresql.service rabbitmq-server.service", "After=network-online.target", "After= does not name postgresql.service"},
		{"ProtectSystem=strict", "ProtectSystem=full", `ProtectSystem="full", want "strict"`},
		{"WantedBy=multi-user.target", "WantedBy=default.target", "WantedBy=\"default.target\", want multi-user.target"},
		{"[Install]", "[Instal]", "unexpected section [Instal]"},
		{"KillSignal=SIGTERM", "KillSignal SIGTERM", `neither a [section] nor Key=Value: "KillSignal SIGTERM"`},
		{"[Unit]", "Before=x.service\n[Unit]", `"Before=x.service" outside a section`},
	} {
		if !strings.Contains(good, tc.from) {
			t.Fatalf("the worker unit has no %q to replace", tc.from)
		}
		text := strings.Replace(good, tc.from, tc.to, 1)
		u, problems := parseUnit(name, text)
		problems = append(problems, checkUnit(app, name, supervisor.RoleWorker, u)...)
		all := strings.Join(problems, "\n")
		if tc.want == "" && len(problems) != 0 || tc.want != "" && !strings.Contains(all, tc.want) {
			t.Errorf("%q -> %q:\ngot  %s\nwant %q", tc.from, tc.to, all, tc.want)
		}
	}
}

// TestSystemdUnitsVerify runs `systemd-analyze verify` over the units
// where it is installed: it must print nothing (it reports unknown keys
// and values it cannot parse on stderr and still exits 0). It checks that
// ExecStart's binary exists, so it reads copies running an executable of
// the test's instead of /usr/local/bin/ffctl.
func TestSystemdUnitsVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed here: the units are checked by TestSystemdUnitsRunEachRoleAsAService's parser only")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "ffctl")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", "--man=no", "--generators=no"}
	for _, r := range unitRoles {
		name := "flowforge-" + string(r) + ".service"
		b, err := os.ReadFile(filepath.Join(unitsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(unitFfctl), []byte(fake)), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	out, err := exec.CommandContext(t.Context(), analyze, args...).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestSystemdEnvironmentFileExample: the example of
// /etc/flowforge/flowforge.env sets the two URLs, each line is a comment or
// KEY="value" (read alike by systemd and sh), and every FLOWFORGE_
// variable it names, set or commented out, is one a flag of ffctl reads.
func TestSystemdEnvironmentFileExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(unitsDir, "flowforge.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	var walk func([]cli.Flag, []*cli.Command)
	walk = func(flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			if d, ok := f.(cli.DocGenerationFlag); ok {
				for _, e := range d.GetEnvVars() {
					known[e] = true
				}
			}
		}
		for _, c := range cmds {
			walk(c.Flags, c.Subcommands)
		}
	}
	app := unitApp()
	walk(app.Flags, app.Commands)
	set := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "# ") || line == "#" {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], "\"$`\\") {
			t.Errorf("flowforge.env.example:%d: %q is neither a comment nor KEY=\"value\" without \", $, ` or \\", i+1, line)
			continue
		}
		if !known[k] {
			t.Errorf("flowforge.env.example:%d: %s is no flag's environment variable", i+1, k)
		}
		if !strings.HasPrefix(line, "#") {
			set[k] = true
		}
	}
	for _, k := range []string{"FLOWFORGE_DATABASE_URL", "FLOWFORGE_AMQP_URL"} {
		if !set[k] {
			t.Errorf("flowforge.env.example does not set %s", k)
		}
	}
}

// TestSystemdSysusersCreatesTheUser applies the sysusers entry to an empty
// root where systemd-sysusers is installed: the user and group flowforge,
// whose home is the units' WorkingDirectory, with no login shell.
func TestSystemdSysusersCreatesTheUser(t *testing.T) {
	t.Parallel()
	sysusers, err := exec.LookPath("systemd-sysusers")
	if err != nil {
		t.Skip("systemd-sysusers is not installed here: deploy/systemd/flowforge.sysusers is not applied")
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry, err := filepath.Abs(filepath.Join(unitsDir, "flowforge.sysusers"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), sysusers, "--root="+root, entry).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(strings.TrimSpace(string(passwd)), ":")
	if len(f) != 7 || f[0] != "flowforge" || f[5] != "/var/lib/flowforge" || f[6] != "/usr/sbin/nologin" {
		t.Errorf("/etc/passwd: %q, want the user flowforge, home /var/lib/flowforge, shell /usr/sbin/nologin", passwd)
	}
	group, err := os.ReadFile(filepath.Join(root, "etc", "group"))
	if err != nil || !strings.HasPrefix(string(group), "flowforge:") {
		t.Errorf("/etc/group: %q (%v), want the group flowforge", group, err)
	}
}
