package cli_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// backdate moves a run's creation ago into the past (database clock).
func (h *harness) backdate(id uuid.UUID, ago time.Duration) {
	h.t.Helper()
	if _, err := h.db.ExecContext(h.ctx, `UPDATE workflow_runs SET created_at = now() - $2::bigint * interval '1 millisecond' WHERE id = $1`, id, ago.Milliseconds()); err != nil {
		h.t.Fatal(err)
	}
}

// mustIn is must with stdin as standard input.
func (h *harness) mustIn(stdin string, args ...string) result {
	h.t.Helper()
	r := h.ffIn(stdin, args...)
	if r.code != 0 {
		h.t.Fatalf("ffctl %v: %s", args, r)
	}
	return r
}

// TestRunListFiltersByParamsAndTime: every --param, --since and --until
// form, alone and together with the other filters; the JSON list names
// exactly the runs wanted, newest first.
func TestRunListFiltersByParamsAndTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	h.apply("name: other\ntasks:\n  - {name: x, handler: noop}\n")
	trig := func(workflow string, args ...string) string {
		r := h.must(append([]string{"run", "trigger", workflow}, args...)...)
		return r.stdout[:36]
	}
	// Created 4h, 3h, 2h and 1h ago, and now.
	d1 := trig("twostep", "--param", "date=2026-11-30", "--param", "n=3")
	d2 := trig("twostep", "--param", "date=2026-12-01", "--param", "n=4")
	oth := trig("other", "--param", "date=2026-11-30")
	fileRun := h.mustIn(`{"n": 4}`, "run", "trigger", "twostep", "--params-file", "-").stdout[:36] // n the number 4
	now := trig("twostep", "--param", "date=2026-11-30", "--param", "who=a=b")
	for i, id := range []string{d1, d2, oth} {
		h.backdate(uuid.MustParse(id), time.Duration(4-i)*time.Hour)
	}
	h.backdate(uuid.MustParse(fileRun), time.Hour)
	at := func(id string) string { return h.run(uuid.MustParse(id)).CreatedAt.UTC().Format(time.RFC3339Nano) }
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"one param", []string{"--param", "date=2026-11-30"}, []string{now, oth, d1}},
		{"-p", []string{"-p", "date=2026-11-30"}, []string{now, oth, d1}},
		{"params AND", []string{"--param", "date=2026-11-30", "--param", "n=3"}, []string{d1}},
		{"param and workflow", []string{"--param", "date=2026-11-30", "--workflow", "twostep"}, []string{now, d1}},
		{"a value holding =", []string{"--param", "who=a=b"}, []string{now}},
		{"a string or a JSON value", []string{"--param", "n=4"}, []string{fileRun, d2}},
		{"a JSON string only", []string{"--param", `n="4"`}, []string{d2}},
		{"no match", []string{"--param", "date=1999-01-01"}, []string{}},
		{"since an age", []string{"--since", "150m"}, []string{now, fileRun, oth}},
		{"since days", []string{"--since", "1d"}, []string{now, fileRun, oth, d2, d1}},
		{"until an age", []string{"--until", "90m"}, []string{oth, d2, d1}},
		{"a window of ages", []string{"--since", "3h30m", "--until", "90m"}, []string{oth, d2}},
		{"a window of times", []string{"--since", at(d2), "--until", at(oth)}, []string{oth, d2}},
		{"a time and an age", []string{"--since", at(d1), "--until", "150m"}, []string{d2, d1}},
		{"window, param, state, limit", []string{"--since", "5h", "--param", "date=2026-11-30", "--state", "running", "--limit", "2"}, []string{now, oth}},
		{"window and before", []string{"--since", "5h", "--before", at(oth)}, []string{d2, d1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs := decode[[]runOut](t, h.must(append([]string{"run", "list", "-o", "json"}, tc.args...)...).stdout)
			got := []string{}
			for _, r := range runs {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("run list %v: %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

// TestRunListRefusesABadParamOrTimeFilter: each bad value is a usage error
// (exit 2) saying what is wrong, with nothing on stdout.
func TestRunListRefusesABadParamOrTimeFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	h.trigger("twostep")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"param without =", []string{"--param", "k"}, `--param "k": want key=value`},
		{"param with an empty key", []string{"--param", "=v"}, `--param "=v": the key is empty`},
		{"param with a NUL", []string{"--param", "k=a\x00b"}, "contains a NUL character"},
		{"param not UTF-8", []string{"--param", "k=\xff"}, "not valid UTF-8"},
		{"since yesterday", []string{"--since", "yesterday"}, `--since "yesterday": want an RFC 3339 time such as 2026-11-30T03:00:00Z, or an age such as 2h, 90m or 3d`},
		{"until a date", []string{"--until", "2026-11-30"}, `--until "2026-11-30": want an RFC 3339 time`},
		{"since a negative age", []string{"--since", "-2h"}, `--since "-2h": want an RFC 3339 time`},
		{"since a zero age", []string{"--since", "0s"}, `--since "0s": an age must be positive`},
		{"since too long", []string{"--since", "200000d"}, `--since "200000d": too long`},
		{"since empty", []string{"--since", ""}, "--since is empty"},
		{"until blank", []string{"--until", " "}, "--until is empty"},
		{"since after until, ages", []string{"--since", "1h", "--until", "2h"}, `--since "1h" is after --until "2h"`},
		{"since after until, times", []string{"--since", "2026-11-30T03:00:00Z", "--until", "2026-11-30T02:59:59Z"}, `--since "2026-11-30T03:00:00Z" is after --until "2026-11-30T02:59:59Z"`},
		{"since after until, mixed", []string{"--since", "1m", "--until", "2026-11-30T00:00:00Z"}, "is after --until"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff(append([]string{"run", "list"}, tc.args...)...)
			expect(t, r, 2, tc.want)
			if r.stdout != "" {
				t.Fatalf("a refused run list printed %q", r.stdout)
			}
			h.assertUnchanged(before)
		})
	}
}
