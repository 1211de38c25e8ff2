package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// TestBadInputIsRefusedAndWritesNothing runs every kind of bad input the
// operator CLI must refuse, each against the same seeded database, and
// checks the exit code, that the message names the problem, that nothing
// was printed on standard output, and that no row of any table changed.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID, dead := h.deadRun()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wf := func(name, content string) []string { return []string{"workflow", "apply", "-f", file(name, content)} }
	trig := func(args ...string) []string { return append([]string{"run", "trigger", "twostep"}, args...) }
	unknown := uuid.NewString()
	deadID, runIDs := dead.String(), runID.String()
	big := `{"blob":"` + strings.Repeat("x", core.MaxParamsBytes) + `"}`

	cases := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string
	}{
		// Workflow files.
		{"cycle", wf("cycle.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [c]}\n  - {name: b, handler: noop, depends_on: [a]}\n  - {name: c, handler: noop, depends_on: [b]}\n"),
			"", 2, []string{"dependency cycle: a -> c -> b -> a"}},
		{"self dependency", wf("self.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [a]}\n"), "", 2, []string{`task "a" depends on itself`}},
		{"unknown dependency", wf("unknown-dep.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [ghost]}\n"), "", 2, []string{`task "a" depends on unknown task "ghost"`}},
		{"duplicate task names", wf("dup.yaml", "name: w\ntasks:\n  - {name: a, handler: noop}\n  - {name: a, handler: fail}\n"), "", 2, []string{`duplicate task name "a"`}},
		{"no tasks", wf("empty-tasks.yaml", "name: w\ntasks: []\n"), "", 2, []string{`workflow "w" has no tasks`}},
		{"tasks missing", wf("no-tasks.yaml", "name: w\n"), "", 2, []string{"has no tasks"}},
		{"invalid workflow name", wf("badname.yaml", "name: Nightly Report\ntasks:\n  - {name: a, handler: noop}\n"), "", 2, []string{`workflow name "Nightly Report" must match`}},
		{"workflow name too long", wf("longname.yaml", "name: "+strings.Repeat("w", 129)+"\ntasks:\n  - {name: a, handler: noop}\n"), "", 2, []string{"longer than 128 characters"}},
		{"missing workflow name", wf("noname.yaml", "tasks:\n  - {name: a, handler: noop}\n"), "", 2, []string{"workflow name is missing"}},
		{"invalid task name", wf("badtask.yaml", "name: w\ntasks:\n  - {name: Extract!, handler: noop}\n"), "", 2, []string{`task name "Extract!" must match`}},
		{"unknown field", wf("unknown-field.yaml", "name: w\ncolour: red\ntasks:\n  - {name: a, handler: noop}\n"), "", 2, []string{`unknown field "colour"`}},
		{"unknown task field", wf("unknown-task-field.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, retries: 3}\n"), "", 2, []string{`unknown field "retries"`}},
		{"zero max_attempts", wf("zero.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, retry: {max_attempts: 0}}\n"), "", 2, []string{`task "a": retry.max_attempts must be between 1 and 1000, got 0`}},
		{"negative max_attempts", wf("neg.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, retry: {max_attempts: -2}}\n"), "", 2, []string{"retry.max_attempts must be between 1 and 1000, got -2"}},
		{"unparseable timeout", wf("timeout.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, timeout: soon}\n"), "", 2, []string{`unparseable duration "soon"`}},
		{"numeric timeout", wf("numtimeout.yaml", "name: w\ntasks:\n  - {name: a, handler: noop}\n  - {name: load, handler: noop, timeout: 10}\n"), "", 2, []string{`task "load": timeout: want a duration string`}},
		{"negative timeout", wf("negtimeout.yaml", "name: w\ntasks:\n  - {name: a, handler: noop, timeout: -5s}\n"), "", 2, []string{"timeout must be positive"}},
		{"missing handler", wf("nohandler.yaml", "name: w\ntasks:\n  - {name: a}\n"), "", 2, []string{`task "a": handler is missing`}},
		{"not YAML or JSON", wf("garbage.yaml", "name: [unclosed\n  tasks: {{{\n"), "", 2, []string{"not YAML or JSON"}},
		{"binary file", wf("binary.bin", "\x00\x01\x02\xff\xfe"), "", 2, []string{"not YAML or JSON"}},
		{"JSON that is not a mapping", wf("array.json", `[{"name": "w"}]`), "", 2, []string{"want a mapping with name and tasks"}},
		{"empty file", wf("empty.yaml", ""), "", 2, []string{"the file is empty"}},
		{"JSON with unknown field", wf("bad.json", `{"name":"w","tasks":[{"name":"a","handler":"noop","dependson":["x"]}]}`), "", 2, []string{`unknown field "dependson"`}},
		{"description with NUL", wf("nul.yaml", "name: w\ndescription: \"a\\0b\"\ntasks:\n  - {name: a, handler: noop}\n"), "", 2,
			[]string{`invalid workflow: description contains a NUL character (\u0000), which PostgreSQL cannot store`}},
		{"missing file", []string{"workflow", "apply", "-f", filepath.Join(dir, "nope.yaml")}, "", 2, []string{"cannot read", "nope.yaml", "no such file"}},
		{"no -f", []string{"workflow", "apply"}, "", 2, []string{"needs -f FILE"}},
		{"bad workflow on stdin", []string{"workflow", "apply", "-f", "-"}, "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [zz]}\n", 2, []string{`unknown task "zz"`}},

		// Params.
		{"params not JSON", trig("--params-file", file("p1.json", `{"date": 2026-11-30`)), "", 2, []string{"invalid params: not JSON"}},
		{"params with NUL", trig("--params-file", file("p2.json", `{"a": {"b": "x\u0000y"}}`)), "", 2, []string{`$.a.b contains a NUL character`}},
		{"params over the size limit", trig("--params-file", file("p3.json", big)), "", 2, []string{"exceeds the limit of 1048576 bytes"}},
		{"params not an object", trig("--params-file", file("p4.json", `[1, 2]`)), "", 2, []string{"want a JSON object, got an array"}},
		{"params on stdin not JSON", trig("--params-file", "-"), "date=today", 2, []string{"not JSON"}},
		{"params file missing", trig("--params-file", filepath.Join(dir, "none.json")), "", 2, []string{"cannot read", "none.json"}},
		{"--param without =", trig("--param", "date"), "", 2, []string{`--param "date": want key=value`}},
		{"--param with empty key", trig("--param", "=x"), "", 2, []string{"want key=value"}},
		{"--param with NUL", trig("--param", "a=x\x00y"), "", 2, []string{"NUL character"}},
		{"idempotency key with NUL", trig("--idempotency-key", "k\x00"), "", 2, []string{"--idempotency-key"}},
		{"idempotency key over the limit", trig("--idempotency-key", strings.Repeat("k", core.MaxIdempotencyKeyBytes+1)), "", 2, []string{"--idempotency-key: invalid idempotency key: 513 bytes, more than the limit of 512 bytes"}},
		{"params with a key twice", trig("--params-file", file("p5.json", `{"date": "a", "n": 1, "date": "b"}`)), "", 2, []string{"invalid params: key $.date appears twice in one object"}},
		{"--version 0 at trigger", trig("--version", "0"), "", 2, []string{"--version 0: versions are numbered from 1"}},
		{"--version 0 at show", []string{"workflow", "show", "w", "--version", "0"}, "", 2, []string{"--version 0: versions are numbered from 1"}},
		{"negative timeout flag", trig("--wait", "--timeout", "-1s"), "", 2, []string{"--timeout -1s: must not be negative"}},
		{"unparseable timeout flag", trig("--wait", "--timeout", "soon"), "", 2, []string{"invalid value \"soon\" for flag --timeout"}},
		{"invalid workflow name at trigger", []string{"run", "trigger", "Bad Name"}, "", 2, []string{`workflow name "Bad Name" must match`}},
		{"trigger without a name", []string{"run", "trigger"}, "", 2, []string{"one workflow name"}},
		{"unknown workflow", []string{"run", "trigger", "no-such-workflow"}, "", 1, []string{`workflow "no-such-workflow": not found`}},
		{"unknown workflow version", trig("--version", "9"), "", 1, []string{"not found"}},
		{"unknown workflow at show", []string{"workflow", "show", "no-such-workflow"}, "", 1, []string{"not found"}},

		// Ids.
		{"malformed run id (show)", []string{"run", "show", "run-42"}, "", 2, []string{`malformed run id "run-42"`}},
		{"malformed run id (wait)", []string{"run", "wait", "42"}, "", 2, []string{"malformed run id"}},
		{"malformed run id (cancel)", []string{"run", "cancel", "0b7c6d2e_8f0a", "--reason", "r"}, "", 2, []string{"malformed run id"}},
		{"run id prefix too short", []string{"run", "show", runIDs[:5]}, "", 2, []string{"malformed run id", "at least 6 hex digits"}},
		{"dash out of place", []string{"task", "show", deadID[:4] + "-" + deadID[4:8]}, "", 2, []string{"malformed task id"}},
		{"unknown run prefix", []string{"run", "show", flip(runIDs)[:8]}, "", 1, []string{"run " + flip(runIDs)[:8] + ": not found"}},
		{"run id as task id", []string{"task", "show", runIDs}, "", 2, []string{runIDs + " is a run id, not a task id (ffctl run show " + runIDs + ")"}},
		{"run id prefix as task id", []string{"task", "show", runIDs[:8]}, "", 2, []string{"is a run id, not a task id (ffctl run show " + runIDs + ")"}},
		{"task id as run id", []string{"run", "show", deadID[:8]}, "", 2, []string{"is a task id, not a run id (ffctl task show " + deadID + ")"}},
		{"task id as run id (wait)", []string{"run", "wait", deadID}, "", 2, []string{"is a task id, not a run id"}},
		{"task id as run id (cancel)", []string{"run", "cancel", deadID, "--reason", "r"}, "", 2, []string{"is a task id, not a run id"}},
		{"task id as run filter", []string{"dead", "list", "--run", deadID[:8]}, "", 2, []string{"is a task id, not a run id"}},
		{"task id as run filter (requeue)", []string{"dead", "requeue", "--all", "--run", deadID, "--reason", "r", "--yes"}, "", 2, []string{"is a task id, not a run id"}},
		{"malformed task id", []string{"task", "show", "xyz"}, "", 2, []string{`malformed task id "xyz"`}},
		{"tui with an argument", []string{"tui", "extra"}, "", 2, []string{`tui takes no arguments (got "extra")`}},
		{"tui refreshing too often", []string{"tui", "--refresh", "1ms"}, "", 2, []string{"--refresh 1ms: want at least 100ms"}},
		{"malformed id among good ones", []string{"dead", "requeue", deadID, "not-a-uuid", "--reason", "r"}, "", 2, []string{`malformed task id "not-a-uuid"`}},
		{"malformed run filter", []string{"dead", "list", "--run", "r1"}, "", 2, []string{"malformed run id"}},
		{"unknown run id (show)", []string{"run", "show", unknown}, "", 1, []string{"run " + unknown + ": not found"}},
		{"unknown run id (wait)", []string{"run", "wait", unknown, "--timeout", "5s"}, "", 1, []string{"not found"}},
		{"unknown run id (wait, tiny timeout)", []string{"run", "wait", unknown, "--timeout", "1ns"}, "", 1, []string{"run " + unknown + ": not found"}},
		{"unknown run id (cancel)", []string{"run", "cancel", unknown, "--reason", "r"}, "", 1, []string{"not found"}},
		{"unknown task id (show)", []string{"task", "show", unknown}, "", 1, []string{"task " + unknown + ": not found"}},
		{"unknown task id (requeue)", []string{"dead", "requeue", unknown, "--reason", "r"}, "", 1, []string{unknown, "not found"}},
		{"unknown id among good ones", []string{"dead", "requeue", deadID, unknown, "--reason", "r"}, "", 1, []string{unknown, "not found", "nothing was requeued"}},
		{"requeue a run id", []string{"dead", "requeue", runIDs, "--reason", "r"}, "", 2, []string{"is a run id, not a task id", "nothing was requeued"}},

		// Usage.
		{"requeue without reason", []string{"dead", "requeue", deadID}, "", 2, []string{"--reason is required"}},
		{"requeue with blank reason", []string{"dead", "requeue", deadID, "--reason", "  "}, "", 2, []string{"--reason is required"}},
		{"requeue --all without --yes off a terminal", []string{"dead", "requeue", "--all", "--reason", "r"}, "", 2, []string{"needs --yes"}},
		{"requeue ids and --all", []string{"dead", "requeue", deadID, "--all", "--reason", "r", "--yes"}, "", 2, []string{"not both"}},
		{"requeue filter without --all", []string{"dead", "requeue", deadID, "--workflow", "twostep", "--reason", "r"}, "", 2, []string{"--workflow only applies with --all"}},
		{"requeue nothing", []string{"dead", "requeue", "--reason", "r"}, "", 2, []string{"at least one task id"}},
		{"cancel with empty reason", []string{"run", "cancel", runIDs, "--reason", ""}, "", 2, []string{"--reason"}},
		{"cancel without reason", []string{"run", "cancel", runIDs}, "", 2, []string{"--reason is required: say why the run is cancelled"}},
		{"unknown command", []string{"frobnicate"}, "", 2, []string{"unknown command 'frobnicate'"}},
		{"unknown subcommand", []string{"run", "frobnicate"}, "", 2, []string{"unknown command 'frobnicate'"}},
		{"unknown flag", []string{"run", "list", "--colour"}, "", 2, []string{"flag provided but not defined: --colour"}},
		{"unknown global flag last", []string{"--colour"}, "", 2, []string{"flag provided but not defined"}},
		{"bad output format", []string{"run", "list", "-o", "yaml"}, "", 2, []string{`-o "yaml": want table or json`}},
		{"limit zero", []string{"run", "list", "--limit", "0"}, "", 2, []string{"--limit 0: must be between 1 and 10000"}},
		{"limit too large", []string{"dead", "list", "--limit", "10001"}, "", 2, []string{"must be between 1 and 10000"}},
		{"an unknown long flag is named with two dashes", []string{"limits", "set", "k", "--limt", "3", "--reason", "r"}, "", 2, []string{"flag provided but not defined: --limt (see ffctl limits set --help)"}},
		{"a bad value of a long flag is named with two dashes", []string{"limits", "set", "k", "--limit", "abc", "--reason", "r"}, "", 2, []string{`invalid value "abc" for flag --limit: parse error`}},
		{"a long flag without its value is named with two dashes", []string{"run", "list", "--limit"}, "", 2, []string{"flag needs an argument: --limit"}},
		{"an empty --queue", []string{"--queue", "", "status"}, "", 2, []string{"--queue (FLOWFORGE_QUEUE) is empty: name the dispatch queue, or leave it unset for flowforge.dispatch"}},
		{"an empty --kind", []string{"limits", "set", "k", "--limit", "3", "--kind", "", "--reason", "r"}, "", 2, []string{"--kind is empty: want concurrency, rate or run"}},
		{"limit with a leading zero (octal to Go)", []string{"run", "list", "--limit", "010"}, "", 2, []string{"--limit 010: write whole numbers in plain decimal"}},
		{"limit in hexadecimal", []string{"limits", "set", "k", "--limit=0x10", "--kind", "concurrency", "--reason", "r"}, "", 2, []string{"--limit 0x10: write whole numbers in plain decimal"}},
		{"limit with a digit separator", []string{"limits", "set", "k", "--reason", "r", "--limit", "1_0"}, "", 2, []string{"--limit 1_0: write whole numbers in plain decimal"}},
		{"a string flag's value is not read as a number", []string{"limits", "set", "k", "--reason", "010", "--limit", "08"}, "", 2, []string{"--limit 08: write whole numbers in plain decimal"}},
		{"bad --before", []string{"run", "list", "--before", "yesterday"}, "", 2, []string{`--before "yesterday"`}},
		{"bad --state", []string{"run", "list", "--state", "DONE"}, "", 2, []string{`--state "DONE"`}},
		{"negative --older-than", []string{"dead", "list", "--older-than", "-1h"}, "", 2, []string{`--older-than "-1h"`}},
		{"zero --older-than in days", []string{"dead", "list", "--older-than", "0d"}, "", 2, []string{`--older-than "0d": must be positive`}},
		{"unparseable --older-than", []string{"dead", "requeue", "--all", "--older-than", "3days", "--reason", "r", "--yes"}, "", 2, []string{`--older-than "3days"`}},
		{"show two runs", []string{"run", "show", runIDs, runIDs}, "", 2, []string{"exactly one run id"}},
		{"completion for an unknown shell", []string{"completion", "powershell"}, "", 2, []string{`unknown shell "powershell"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ffIn(tc.stdin, tc.args...)
			expect(t, r, tc.code, tc.want...)
			if !strings.HasPrefix(r.stderr, "ffctl: ") {
				t.Errorf("message does not start with \"ffctl: \": %q", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on refusal:\n%s", r.stdout)
			}
			h.assertUnchanged(before)
		})
	}
	if st := h.state(dead); st != core.TaskDead {
		t.Fatalf("the DEAD task is %s after the refusals, want DEAD", st)
	}
}

// flip returns id with its first hex digit changed: a prefix that names
// nothing in a database holding id.
func flip(id string) string {
	c := "1"
	if id[0] == '1' {
		c = "2"
	}
	return c + id[1:]
}
