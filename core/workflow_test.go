package core_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flowforge/flowforge/core"
)

const validYAML = `
name: nightly-report
description: optional text
fail_fast: true
tasks:
  - name: extract
    handler: shell
    params: {command: ["sh", "-c", "echo hi"]}
    depends_on: []
    retry: {max_attempts: 5, initial_backoff: 2s, max_backoff: 1m}
    timeout: 10m
    idempotency_key: "extract-{{ .Params.date }}"
    idempotency_ttl: 24h
  - name: transform
    handler: noop
    depends_on: [extract]
  - name: load.v2_x
    handler: noop
    depends_on: [extract, transform]
`

const validJSON = `{
  "name": "nightly-report",
  "fail_fast": true,
  "tasks": [
    {"name": "extract", "handler": "shell", "params": {"command": ["sh", "-c", "echo hi"]},
     "retry": {"max_attempts": 5, "initial_backoff": "2s", "max_backoff": "1m"},
     "timeout": "10m", "idempotency_key": "extract-{{ .Params.date }}", "idempotency_ttl": "24h"},
    {"name": "transform", "handler": "noop", "depends_on": ["extract"]},
    {"name": "load.v2_x", "handler": "noop", "depends_on": ["extract", "transform"]}
  ]
}`

func TestParseDefinitionAcceptsYAMLAndJSON(t *testing.T) {
	for name, src := range map[string]string{"yaml": validYAML, "json": validJSON} {
		t.Run(name, func(t *testing.T) {
			def, err := core.ParseDefinition([]byte(src))
			if err != nil {
				t.Fatalf("ParseDefinition: %v", err)
			}
			if def.Name != "nightly-report" || !def.FailFast || len(def.Tasks) != 3 {
				t.Fatalf("got %+v", def)
			}
			ex := def.Tasks[0]
			if ex.Handler != "shell" || ex.TimeoutOrZero() != 10*time.Minute || ex.IdempotencyKey != "extract-{{ .Params.date }}" || ex.IdempotencyTTLOrZero() != 24*time.Hour {
				t.Fatalf("extract = %+v", ex)
			}
			if got := string(ex.Params); got != `{"command":["sh","-c","echo hi"]}` {
				t.Fatalf("extract params = %s", got)
			}
			want := core.RetryPolicy{MaxAttempts: 5, InitialBackoff: 2 * time.Second, MaxBackoff: time.Minute}
			if got := ex.Policy(); got != want {
				t.Fatalf("Policy() = %+v, want %+v", got, want)
			}
			if got := def.Deps()["load.v2_x"]; strings.Join(got, ",") != "extract,transform" {
				t.Fatalf("Deps[load.v2_x] = %v", got)
			}
			if d := core.Depths(def.Deps()); d["load.v2_x"] != 2 {
				t.Fatalf("Depths = %v", d)
			}
		})
	}
}

func TestPolicyDefaults(t *testing.T) {
	i := func(n int) *int { return &n }
	d := func(v time.Duration) *core.Duration { x := core.Duration(v); return &x }
	for _, tc := range []struct {
		name  string
		retry *core.RetrySpec
		want  core.RetryPolicy
	}{
		{"no retry block", nil, core.RetryPolicyDefault()},
		{"empty retry block", &core.RetrySpec{}, core.RetryPolicyDefault()},
		{"only attempts", &core.RetrySpec{MaxAttempts: i(7)}, core.RetryPolicy{MaxAttempts: 7, InitialBackoff: time.Second, MaxBackoff: time.Minute}},
		{"initial above the default cap raises the cap", &core.RetrySpec{InitialBackoff: d(5 * time.Minute)}, core.RetryPolicy{MaxAttempts: 3, InitialBackoff: 5 * time.Minute, MaxBackoff: 5 * time.Minute}},
		{"initial below the default cap", &core.RetrySpec{InitialBackoff: d(10 * time.Millisecond)}, core.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: time.Minute}},
		{"explicit cap", &core.RetrySpec{MaxBackoff: d(time.Hour)}, core.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (core.TaskDef{Name: "t", Handler: "noop", Retry: tc.retry}).Policy(); got != tc.want {
				t.Fatalf("Policy() = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := (core.TaskDef{}).TimeoutOrZero(); got != 0 {
		t.Fatalf("TimeoutOrZero() = %s, want 0", got)
	}
}

// TestOnlyMaxBackoffBelowTheDefaultInitialIsAccepted documents an asymmetry
// in TaskDef.Policy: an initial_backoff above the default cap raises the cap,
// but a max_backoff below the default initial_backoff is refused with an
// error about initial_backoff, a field the author never wrote.
func TestOnlyMaxBackoffBelowTheDefaultInitialIsAccepted(t *testing.T) {
	def, err := core.ParseDefinition([]byte("name: w\ntasks:\n  - {name: a, handler: noop, retry: {max_backoff: 500ms}}\n"))
	if err != nil {
		t.Fatalf("ParseDefinition: %v", err)
	}
	if p := def.Tasks[0].Policy(); p.MaxBackoff != 500*time.Millisecond || p.InitialBackoff > p.MaxBackoff {
		t.Fatalf("Policy() = %+v", p)
	}
}

func TestParseDefinitionRejectsBadInput(t *testing.T) {
	task := func(extra string) string {
		return "name: w\ntasks:\n  - {name: a, handler: noop" + extra + "}\n"
	}
	long := strings.Repeat("x", core.MaxNameLength+1)
	for _, tc := range []struct {
		name string
		src  string
		want []string // substrings the message must contain
	}{
		{"cycle", "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [c]}\n  - {name: b, handler: noop, depends_on: [a]}\n  - {name: c, handler: noop, depends_on: [b]}\n",
			[]string{"cycle", "a -> c -> b -> a"}},
		{"self dependency", task(", depends_on: [a]"), []string{`"a"`, "itself"}},
		// Decoding errors name the task and field (issue 11: `timeout: 10`
		// said only "want a duration string").
		{"numeric timeout", "name: w\ntasks:\n  - {name: a, handler: noop}\n  - {name: load, handler: noop, timeout: 10}\n",
			[]string{`task "load": timeout: want a duration string such as "30s" or "5m", got 10`}},
		{"unparseable timeout names the task", task(", timeout: soon"), []string{`task "a": timeout: unparseable duration "soon"`}},
		{"octal-looking number", task(", retry: {max_attempts: 010}"), []string{"line 3: tasks[0].retry.max_attempts: 010: write whole numbers in plain decimal (YAML reads 010 as octal 8"}},
		{"hexadecimal number", task(", retry: {max_attempts: 0x10}"), []string{"tasks[0].retry.max_attempts: 0x10: write whole numbers in plain decimal"}},
		{"number with a separator", task(", retry: {max_attempts: 1_0}"), []string{"tasks[0].retry.max_attempts: 1_0: write whole numbers in plain decimal"}},
		{"octal number in params", task(", params: {codes: [1, 0o17]}"), []string{"tasks[0].params.codes[1]: 0o17: write whole numbers in plain decimal"}},
		{"whole number with an exponent", task(", retry: {max_attempts: 1e3}"), []string{"tasks[0].retry.max_attempts: 1e3: write whole numbers in plain decimal"}},
		{"whole number with a fraction", "name: w\ntasks:\n  - {name: a, handler: noop, priority: 3.0}\n", []string{"line 3: tasks[0].priority: 3.0: write whole numbers in plain decimal"}},
		{"bad retry field names the task", task(", retry: {max_attempts: many}"), []string{`task "a": retry.max_attempts must be a whole number, got a string`}},
		{"unknown task field names the task", task(", retries: 3"), []string{`task "a": retries: unknown field "retries"`}},
		{"nameless task with a bad field", "name: w\ntasks:\n  - {handler: noop, timeout: 10}\n", []string{"tasks[0]: timeout: "}},
		{"unknown dependency", task(", depends_on: [nope]"), []string{`"a"`, `unknown task "nope"`}},
		{"duplicate dependency", "name: w\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a, a]}\n", []string{`"b"`, `"a" twice`}},
		{"duplicate task names", "name: w\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n  - {name: a, handler: noop}\n", []string{`duplicate task name "a"`}},
		{"no tasks", "name: w\ntasks: []\n", []string{`"w"`, "no tasks"}},
		{"tasks missing", "name: w\n", []string{"no tasks"}},
		{"workflow name missing", "tasks:\n  - {name: a, handler: noop}\n", []string{"workflow name is missing"}},
		{"invalid workflow name", "name: Nightly Report\ntasks:\n  - {name: a, handler: noop}\n", []string{`workflow name "Nightly Report"`}},
		{"workflow name starts with a dash", "name: -w\ntasks:\n  - {name: a, handler: noop}\n", []string{`"-w"`}},
		{"invalid task name", "name: w\ntasks:\n  - {name: Extract!, handler: noop}\n", []string{`task name "Extract!"`}},
		{"workflow name too long", "name: " + long + "\ntasks:\n  - {name: a, handler: noop}\n", []string{"longer than 128"}},
		{"task name too long", "name: w\ntasks:\n  - {name: " + long + ", handler: noop}\n", []string{"task name", "longer than 128"}},
		{"handler name too long", "name: w\ntasks:\n  - {name: a, handler: " + long + "}\n", []string{`"a"`, "handler name is 129 bytes, longer than the limit of 128"}},
		{"unknown top-level field", "name: w\ntaks: []\ntasks:\n  - {name: a, handler: noop}\n", []string{`unknown field "taks"`}},
		{"unknown task field", task(", retyr: {max_attempts: 2}"), []string{`unknown field "retyr"`}},
		{"unknown retry field", task(", retry: {attempts: 2}"), []string{`unknown field "attempts"`}},
		{"max_attempts zero", task(", retry: {max_attempts: 0}"), []string{`"a"`, "max_attempts", "got 0"}},
		{"max_attempts negative", task(", retry: {max_attempts: -1}"), []string{`"a"`, "max_attempts", "got -1"}},
		{"max_attempts over the limit", task(", retry: {max_attempts: 1001}"), []string{"max_attempts", "1001"}},
		{"max_backoff below initial", task(", retry: {initial_backoff: 1m, max_backoff: 1s}"), []string{"max_backoff"}},
		{"negative backoff", task(", retry: {initial_backoff: -1s}"), []string{"initial_backoff"}},
		{"unparseable timeout", task(", timeout: ten minutes"), []string{`"ten minutes"`}},
		{"timeout as a bare number", task(", timeout: 10"), []string{"duration"}},
		{"negative timeout", task(", timeout: -5s"), []string{`"a"`, "timeout must be positive"}},
		{"zero timeout", task(", timeout: 0s"), []string{`"a"`, "timeout must be positive"}},
		{"binary garbage", "\x00\x01\x02\xff\xfe\x89PNG", []string{"not YAML or JSON"}},
		{"unbalanced braces", "{{{", []string{"not YAML or JSON"}},
		{"a scalar", "just some words", []string{"mapping"}},
		{"a list", "- a\n- b\n", []string{"mapping"}},
		{"empty file", "", []string{"empty"}},
		{"only whitespace", " \n\t\n", []string{"empty"}},
		{"two YAML documents", task("") + "---\n" + task(""), []string{"more than one YAML document"}},
		{"params a list", task(", params: [1, 2]"), []string{`"a"`, "params", "object"}},
		{"params a string", task(", params: hello"), []string{`"a"`, "params", "object"}},
		{"params with NUL", task(`, params: {x: "a\0b"}`), []string{`task "a": params.x contains a NUL character (\u0000), which PostgreSQL cannot store`}},
		{"description with NUL", "name: w\ndescription: \"nightly\\0report\"\ntasks:\n  - {name: a, handler: noop}\n", []string{`description contains a NUL character (\u0000)`}},
		{"handler with NUL", "name: w\ntasks:\n  - {name: a, handler: \"no\\0op\"}\n", []string{`task "a": handler contains a NUL character`}},
		{"when with NUL", task(`, when: "params.x == '\0'"`), []string{`task "a": when contains a NUL character`}},
		{"task name with NUL", "name: w\ntasks:\n  - {name: \"a\\0\", handler: noop}\n", []string{`tasks[0].name contains a NUL character`}},
		{"JSON description with NUL", `{"name":"w","description":"x\u0000","tasks":[{"name":"a","handler":"noop"}]}`, []string{`description contains a NUL character`}},
		{"missing handler", "name: w\ntasks:\n  - {name: a}\n", []string{`"a"`, "handler is missing"}},
		{"blank handler", "name: w\ntasks:\n  - {name: a, handler: \"  \"}\n", []string{"handler is missing"}},
		{"bad idempotency_key template", task(`, idempotency_key: "k-{{ .Params.day"`), []string{`"a"`, "idempotency_key"}},
		{"idempotency_ttl without a key", task(", idempotency_ttl: 1h"), []string{`"a"`, "idempotency_ttl needs an idempotency_key"}},
		{"zero idempotency_ttl", task(`, idempotency_key: k, idempotency_ttl: 0s`), []string{`"a"`, "idempotency_ttl must be positive"}},
		{"negative idempotency_ttl", task(`, idempotency_key: k, idempotency_ttl: -1h`), []string{`"a"`, "idempotency_ttl must be positive"}},
		{"idempotency_ttl over the limit", task(`, idempotency_key: k, idempotency_ttl: 87601h`), []string{`"a"`, "idempotency_ttl 87601h0m0s is longer than the limit"}},
		{"idempotency_ttl under a millisecond", task(`, idempotency_key: k, idempotency_ttl: 10us`), []string{`"a"`, "shorter than a millisecond"}},
		{"idempotency_ttl a bare number", task(`, idempotency_key: k, idempotency_ttl: 3600`), []string{"duration"}},
		{"wrong type for depends_on", task(", depends_on: b"), []string{"depends_on"}},
		{"json with unknown field", `{"name":"w","tasks":[{"name":"a","handler":"noop","retyr":1}]}`, []string{`unknown field "retyr"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, err := core.ParseDefinition([]byte(tc.src))
			if err == nil {
				t.Fatalf("ParseDefinition accepted it: %+v", def)
			}
			if !errors.Is(err, core.ErrBadWorkflow) {
				t.Fatalf("error %q does not wrap ErrBadWorkflow", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseDefinitionLimits(t *testing.T) {
	atLimit := strings.Repeat("x", core.MaxNameLength)
	if _, err := core.ParseDefinition([]byte("name: " + atLimit + "\ntasks:\n  - {name: " + atLimit + ", handler: noop}\n")); err != nil {
		t.Fatalf("names of exactly %d characters: %v", core.MaxNameLength, err)
	}
	var b strings.Builder
	b.WriteString("name: big\ntasks:\n")
	for i := 0; i <= core.MaxTasks; i++ {
		b.WriteString("  - {name: t")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(", handler: noop}\n")
	}
	_, err := core.ParseDefinition([]byte(b.String()))
	if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("%d tasks: %v", core.MaxTasks+1, err)
	}
}

func TestRenderIdempotencyKey(t *testing.T) {
	data := core.KeyData{Params: map[string]any{"day": "2024-01-01", "blank": " "}, Workflow: "wf", Task: "t"}
	for _, tc := range []struct {
		tmpl, want string
		ok         bool
	}{
		{"", "", true},
		{"k-{{ .Params.day }}", "k-2024-01-01", true},
		{"{{ .Workflow }}/{{ .Task }}/{{ .Params.day }}", "wf/t/2024-01-01", true},
		{"k-{{ .Params.missing }}", "", false},
		{"{{ .Params.blank }}", "", false},
		{"k-{{ .Params.day", "", false},
	} {
		got, err := core.RenderIdempotencyKey(tc.tmpl, data)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("RenderIdempotencyKey(%q) = %q, %v; want %q, ok=%v", tc.tmpl, got, err, tc.want, tc.ok)
		}
		if err != nil && tc.tmpl == "k-{{ .Params.missing }}" && !strings.Contains(err.Error(), "missing") {
			t.Errorf("error %q does not name the missing param", err)
		}
	}
}

func TestDefinitionRoundTripsThroughJSON(t *testing.T) {
	def, err := core.ParseDefinition([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jsonMarshal(def)
	if err != nil {
		t.Fatal(err)
	}
	again, err := core.ParseDefinition(js)
	if err != nil {
		t.Fatalf("re-parse of %s: %v", js, err)
	}
	js2, _ := jsonMarshal(again)
	if string(js) != string(js2) {
		t.Fatalf("round trip changed the definition:\n%s\n%s", js, js2)
	}
}

func TestStoredIdempotencyKeyIsBoundedAndKeepsKeysApart(t *testing.T) {
	long := strings.Repeat("é", core.MaxTaskKeyBytes) // 2 bytes a rune: the cut lands mid-rune
	keys := []string{"", "k", strings.Repeat("x", core.MaxTaskKeyBytes), strings.Repeat("x", core.MaxTaskKeyBytes+1),
		long, long + "a", long + "b", "x" + long}
	seen := map[string]string{}
	for _, k := range keys {
		got, err := core.StoredIdempotencyKey(k)
		if err != nil {
			t.Fatalf("StoredIdempotencyKey(%d bytes): %v", len(k), err)
		}
		if again, _ := core.StoredIdempotencyKey(k); again != got {
			t.Fatalf("not deterministic for a %d-byte key", len(k))
		}
		switch {
		case len(k) <= core.MaxTaskKeyBytes && got != k:
			t.Fatalf("a %d-byte key is stored as %q, want itself", len(k), got)
		case len(k) > core.MaxTaskKeyBytes && (len(got) <= core.MaxTaskKeyBytes || len(got) > core.MaxTaskKeyBytes+100 ||
			!utf8.ValidString(got) || !strings.HasPrefix(got, k[:core.MaxTaskKeyBytes-3]) || !strings.Contains(got, "sha256 ")):
			t.Fatalf("a %d-byte key is stored as %d bytes %.80q...", len(k), len(got), got)
		}
		if prev, ok := seen[got]; ok {
			t.Fatalf("keys of %d and %d bytes are stored equal", len(prev), len(k))
		}
		seen[got] = k
	}
	for _, bad := range []string{"a\x00b", "a\xffb", strings.Repeat("x", 2000) + "\x00"} {
		if _, err := core.StoredIdempotencyKey(bad); err == nil {
			t.Errorf("StoredIdempotencyKey(%.20q) accepted a key PostgreSQL text cannot hold verbatim", bad)
		}
	}
}
