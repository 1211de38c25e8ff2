package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestParseDefinitionRefusesBadFlowControl(t *testing.T) {
	t.Parallel()
	head := "name: w\ntasks:\n"
	for _, tc := range []struct{ task, err string }{
		{"{name: a, handler: h, concurrency: {key: \"'c-' + params.c\", limit: 5}}", ""},
		{"{name: a, handler: h, concurrency: {key: stripe-api, limit: 1}}", ""},
		{"{name: a, handler: h, concurrency: {key: tenant, limit: 100000}}", ""},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 100, per: 1m}}", ""},
		{"{name: a, handler: h, for_each: '[1, 2]', concurrency: {key: k, limit: 2}}", ""},
		{"{name: a, handler: h, concurrency: {key: k, limit: 0}}", "concurrency.limit must be between 1 and 100000, got 0"},
		{"{name: a, handler: h, concurrency: {key: k, limit: 100001}}", "concurrency.limit must be between 1 and 100000"},
		{"{name: a, handler: h, concurrency: {key: k}}", `task "a": concurrency.limit must be between 1 and 100000, got 0 (a limit is required)`},
		{"{name: a, handler: h, concurrency: {key: k, limit: 2.5}}", `task "a": concurrency.limit must be a whole number from 1 to 100000, got 2.5`},
		{"{name: a, handler: h, concurrency: {key: k, limit: '3'}}", `task "a": concurrency.limit must be a whole number from 1 to 100000, got a string`},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 99999999999999999999, per: 1m}}", `task "a": rate_limit.limit must be a whole number from 1 to 10000, got 100000000000000000000`},
		{"{name: a, handler: h, concurrency: {key: '', limit: 1}}", "concurrency.key: the key is empty"},
		{"{name: a, handler: h, concurrency: {key: 'a b', limit: 1}}", "concurrency.key: expression does not compile"},
		{"{name: a, handler: h, concurrency: {key: 'upstream.x.id', limit: 1}}", `concurrency.key: upstream.x.id reads upstream: a key cannot read upstream results, whatever the task depends on (it is evaluated once, when the run is triggered); use params`},
		{"{name: a, handler: h, concurrency: {key: '[1]', limit: 1}}", "want string (or int)"},
		{`{name: a, handler: h, concurrency: {key: '"a\u0000b"', limit: 1}}`, "concurrency.key: the key holds invalid UTF-8 or a NUL character"},
		{"{name: a, handler: h, concurrency: {key: k, limit: 1, strategy: queue}}", `unknown field "strategy"`},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 0, per: 1m}}", "rate_limit.limit must be between 1 and 10000, got 0"},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 10001, per: 1m}}", "rate_limit.limit must be between 1 and 10000"},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 5}}", "rate_limit.per must be between 100ms and 24h0m0s, got 0s"},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 5, per: 2d}}", "rate_limit.per must be between 100ms and 24h0m0s, got 48h0m0s"},
		{"{name: a, handler: h, rate_limit: {key: api, limit: 5, per: soon}}", `unparseable duration "soon"`},
		{"{name: a, sleep: {for: 1s}, concurrency: {key: k, limit: 1}}", "a sleep task runs no handler: concurrency and rate_limit apply to tasks that do"},
		{"{name: a, wait_for: {event: e}, rate_limit: {key: k, limit: 1, per: 1s}}", "a wait task runs no handler"},
		{"{name: a, handler: h, priority: 4}", ""},
		{"{name: a, handler: h, priority: 0}", "priority must be between 1 (lowest) and 4 (highest), got 0"},
		{"{name: a, handler: h, priority: 5}", "priority must be between 1 (lowest) and 4 (highest), got 5"},
		{"{name: a, handler: h, priority: high}", `task "a": priority must be a whole number, got a string`},
		{"{name: a, handler: h, concurrency: {key: 5, limit: 1}}", `task "a": concurrency.key must be a string, got a number (quote the number to use it as text)`},
		{"{name: a, handler: h, concurrency: {key: [a], limit: 1}}", `task "a": concurrency.key must be a string, got a list`},
		{"{name: a, handler: h, concurrency: {key: k, limit: [1]}}", `task "a": concurrency.limit must be a whole number from 1 to 100000, got a list`},
		{"{name: a, sleep: {for: 1s}, priority: 3}", "a sleep task runs no handler: priority applies to tasks that do"},
	} {
		_, err := core.ParseDefinition([]byte(head + "  - " + tc.task + "\n"))
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", tc.task, err)
			}
			continue
		}
		if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s:\n got %v\nwant ErrBadWorkflow containing %q", tc.task, err, tc.err)
		}
	}
}

func TestFlowKeysAreEvaluatedOverTheRunsParams(t *testing.T) {
	t.Parallel()
	def, err := core.ParseDefinition([]byte(`name: w
tasks:
  - {name: a, handler: h, concurrency: {key: "'customer-' + params.customer", limit: 5}, rate_limit: {key: stripe-api, limit: 100, per: 1m}}
  - {name: b, handler: h, concurrency: {key: "params.n", limit: 2}, depends_on: [a]}
  - {name: c, handler: h, depends_on: [a]}
`))
	if err != nil {
		t.Fatal(err)
	}
	f, err := core.NewFlowPrograms(def)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys, err := f.Eval(ctx, json.RawMessage(`{"customer": "42", "n": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"customer-42", "7", ""}; !slices.Equal(keys.Concurrency, want) {
		t.Errorf("concurrency keys %q, want %q", keys.Concurrency, want)
	}
	if want := []string{"stripe-api", "", ""}; !slices.Equal(keys.Rate, want) {
		t.Errorf("rate keys %q, want %q", keys.Rate, want)
	}
	for _, tc := range []struct{ params, err string }{
		{`{"n": 1}`, `task "a": concurrency.key`},
		{`{"customer": "42", "n": 1.5}`, `task "b": concurrency.key`},
		{`{"customer": "42", "n": ""}`, `task "b": concurrency.key: bad flow-control key: params.n gives "": the key is empty`},
		{`{"customer": "` + strings.Repeat("x", 300) + `", "n": 1}`, "longer than the limit of 256"},
	} {
		_, err := f.Eval(ctx, json.RawMessage(tc.params))
		if !errors.Is(err, core.ErrBadParams) || !errors.Is(err, core.ErrBadFlowKey) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %v, want ErrBadParams and ErrBadFlowKey containing %q", tc.params, err, tc.err)
		}
	}
	var none *core.FlowPrograms
	if k, err := none.Eval(ctx, json.RawMessage(`{}`)); err != nil || k.Concurrency != nil {
		t.Errorf("a definition without flow control: %+v, %v; want the zero FlowKeys", k, err)
	}
}

func TestParseDefinitionChecksRunLevelConcurrency(t *testing.T) {
	t.Parallel()
	tasks := "tasks:\n  - {name: a, handler: h}\n"
	for _, tc := range []struct{ block, err string }{
		{"concurrency: {key: params.tenant, limit: 2}", ""},
		{"concurrency: {key: params.tenant, limit: 2, strategy: queue}", ""},
		{"concurrency: {key: deploys, limit: 1, strategy: cancel-in-progress}", ""},
		{"concurrency: {key: params.tenant, limit: 1, strategy: cancel-newest}", ""},
		{"concurrency: {key: params.tenant, limit: 2, strategy: drop}", `concurrency: strategy must be queue, cancel-newest or cancel-in-progress, got "drop"`},
		{"concurrency: {key: params.tenant, limit: 0}", "concurrency: limit must be between 1 and 100000, got 0"},
		{"concurrency: {key: params.tenant, limit: 1.5}", "concurrency.limit must be a whole number from 1 to 100000, got 1.5"},
		{"concurrency: {key: 'a b', limit: 1}", "concurrency: key: expression does not compile"},
		{"concurrency: {key: params.tenant, limit: 1, per: 1s}", `unknown field "per"`},
	} {
		d, err := core.ParseDefinition([]byte("name: w\n" + tc.block + "\n" + tasks))
		if tc.err == "" {
			if err != nil || !d.UsesFlowControl() {
				t.Errorf("%s: %v, want it accepted as flow control", tc.block, err)
			}
			continue
		}
		if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s:\n got %v\nwant ErrBadWorkflow containing %q", tc.block, err, tc.err)
		}
	}
	d, err := core.ParseDefinition([]byte("name: w\nconcurrency: {key: \"'t-' + params.tenant\", limit: 2}\n" + tasks))
	if err != nil {
		t.Fatal(err)
	}
	f, err := core.NewFlowPrograms(d)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f.Eval(context.Background(), json.RawMessage(`{"tenant": "acme"}`))
	if err != nil || k.Run != "w/t-acme" {
		t.Fatalf("run key %q, %v; want w/t-acme (the workflow scopes it)", k.Run, err)
	}
	if _, err := f.Eval(context.Background(), json.RawMessage(`{}`)); !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), "concurrency.key") {
		t.Fatalf("a run without the key's param: %v, want ErrBadParams naming concurrency.key", err)
	}
}

// TestAPlainWordKeyIsTheKeyItself: a key written as a plain word (letters,
// digits and . _ : / @ -) is that word, even where CEL could read it as
// arithmetic (2026-12 is not 2014, 10/2 not 5); a quoted or computed
// constant is its value; an expression over params is evaluated.
func TestAPlainWordKeyIsTheKeyItself(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ src, want string }{
		{"stripe-api", "stripe-api"},
		{"2026-12", "2026-12"},
		{"10/2", "10/2"},
		{"007", "007"},
		{"42", "42"},
		{"a-1", "a-1"},
		{"'2026' + '-12'", "2026-12"},
		{"10 / 2", "5"},
		{"'customer-' + params.c", "customer-7"},
	} {
		k, err := core.CompileFlowKey(c.src)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		got, err := k.Eval(context.Background(), json.RawMessage(`{"c": "7"}`))
		if err != nil || got != c.want {
			t.Errorf("key %s gives %q (%v), want %q", c.src, got, err, c.want)
		}
	}
}
