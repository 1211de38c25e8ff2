package client_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
)

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// triggerPaths are the three ways to trigger one run: on the pool, in a
// pgx.Tx and in a *sql.Tx (each transaction rolled back after).
func triggerPaths(f *fixture) map[string]func(workflow string, params any, opts client.TriggerOptions) error {
	sc, db := f.sqlClient()
	return map[string]func(string, any, client.TriggerOptions) error{
		"Trigger": func(w string, p any, o client.TriggerOptions) error {
			_, err := f.c.Trigger(f.ctx, w, p, o)
			return err
		},
		"TriggerTx": func(w string, p any, o client.TriggerOptions) error {
			tx, err := f.pool.Begin(f.ctx)
			if err != nil {
				f.t.Fatal(err)
			}
			defer tx.Rollback(f.ctx)
			_, err = f.c.TriggerTx(f.ctx, tx, w, p, o)
			return err
		},
		"TriggerSQLTx": func(w string, p any, o client.TriggerOptions) error {
			tx, err := db.BeginTx(f.ctx, nil)
			if err != nil {
				f.t.Fatal(err)
			}
			defer tx.Rollback()
			_, err = sc.TriggerSQLTx(f.ctx, tx, w, p, o)
			return err
		},
	}
}

// TestBadTriggersGetAClearErrorAndWriteNothing: each bad trigger, on every
// path, returns the client's error for it with the CLI's message, and
// nothing is written (even on the pool, where a trigger commits).
func TestBadTriggersGetAClearErrorAndWriteNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		workflow string
		params   any
		opts     client.TriggerOptions
		want     error
		text     string
	}{
		{"params not JSON", "one", json.RawMessage(`{"day":`), client.TriggerOptions{}, client.ErrInvalidParams, "invalid params: not JSON"},
		{"params an array", "one", []byte(`["day"]`), client.TriggerOptions{}, client.ErrInvalidParams, "want a JSON object, got an array"},
		{"a NUL escape", "one", json.RawMessage(`{"day":"a\u0000b"}`), client.TriggerOptions{}, client.ErrInvalidParams, `$.day contains a NUL character`},
		{"a NUL in a Go string", "one", map[string]string{"day": "a\x00b"}, client.TriggerOptions{}, client.ErrInvalidParams, `$.day contains a NUL character`},
		{"over the size limit", "one", map[string]string{"day": strings.Repeat("x", core.MaxParamsBytes)}, client.TriggerOptions{}, client.ErrInvalidParams, "exceeds the limit of 1048576 bytes"},
		{"a value JSON cannot hold", "one", map[string]any{"c": make(chan int)}, client.TriggerOptions{}, client.ErrInvalidParams, "cannot be encoded as JSON"},
		{"a key template's param missing", "keyed", order{ID: 1}, client.TriggerOptions{}, client.ErrInvalidParams, "day"},
		{"an idempotency key too long", "one", nil, client.TriggerOptions{IdempotencyKey: strings.Repeat("k", 513)}, client.ErrInvalidParams, "invalid idempotency key: 513 bytes"},
		{"an idempotency key with a NUL", "one", nil, client.TriggerOptions{IdempotencyKey: "a\x00"}, client.ErrInvalidParams, "contains a NUL character"},
		{"an unknown workflow", "nope", nil, client.TriggerOptions{}, client.ErrNotFound, `workflow "nope": not found`},
		{"an unknown version", "one", nil, client.TriggerOptions{Version: 9}, client.ErrNotFound, `workflow "one" version 9: not found`},
		{"a negative version", "one", nil, client.TriggerOptions{Version: -1}, client.ErrInvalidInput, "versions are numbered from 1"},
		{"a bad workflow name", "Not A Name", nil, client.TriggerOptions{}, client.ErrInvalidInput, `workflow name "Not A Name"`},
	}
	f := newFixture(t)
	for path, trigger := range triggerPaths(f) {
		for _, c := range cases {
			err := trigger(c.workflow, c.params, c.opts)
			if !errors.Is(err, c.want) || !contains(err, c.text) {
				t.Errorf("%s, %s: %v; want %v saying %q", path, c.name, err, c.want, c.text)
			}
			if errors.Is(err, client.ErrInvalidParams) && !errors.Is(err, client.ErrInvalidInput) {
				t.Errorf("%s, %s: ErrInvalidParams that is not ErrInvalidInput", path, c.name)
			}
		}
	}
	if n := f.written(); n != 0 {
		t.Fatalf("%d rows written by refused triggers", n)
	}
}

// TestBadIDsAndActionsGetAClearErrorAndWriteNothing: malformed, unknown
// and wrong-kind ids, a missing reason, a bad batch or filter: the
// client's error with the CLI's message, and nothing changed.
func TestBadIDsAndActionsGetAClearErrorAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.c.Trigger(f.ctx, "pair", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := res.RunID.String()
	unknown := uuid.NewString()
	reason := client.ActionOptions{Reason: "test"}
	cases := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"a malformed run id", func() error { _, err := f.c.Run(f.ctx, "xyz"); return err }, client.ErrInvalidInput, `malformed run id "xyz": want a UUID`},
		{"a prefix too short", func() error { _, err := f.c.Run(f.ctx, run[:5]); return err }, client.ErrInvalidInput, "malformed run id"},
		{"the nil UUID", func() error { _, err := f.c.Run(f.ctx, uuid.Nil.String()); return err }, client.ErrInvalidInput, "is the nil UUID, which names no run"},
		{"an unknown run", func() error { _, err := f.c.Run(f.ctx, unknown); return err }, client.ErrNotFound, "run " + unknown + ": not found"},
		{"an unknown run prefix", func() error { _, err := f.c.Run(f.ctx, "ffffff"); return err }, client.ErrNotFound, "run ffffff: not found"},
		{"a run id for a task", func() error { _, err := f.c.Task(f.ctx, run); return err }, client.ErrInvalidInput, "is a run id, not a task id"},
		{"a malformed task id", func() error { _, err := f.c.Task(f.ctx, "g00000"); return err }, client.ErrInvalidInput, `malformed task id "g00000"`},
		{"wait for an unknown run", func() error { _, err := f.c.Wait(f.ctx, unknown, client.WaitOptions{}); return err }, client.ErrNotFound, "not found"},
		{"cancel without a reason", func() error { _, err := f.c.Cancel(f.ctx, run, client.ActionOptions{}); return err }, client.ErrInvalidInput, "reason"},
		{"cancel an unknown run", func() error { _, err := f.c.Cancel(f.ctx, unknown, reason); return err }, client.ErrNotFound, "not found"},
		{"requeue a malformed id", func() error { _, err := f.c.RequeueDead(f.ctx, []string{"zz"}, reason); return err }, client.ErrInvalidInput, `malformed task id "zz"`},
		{"requeue unknown tasks", func() error {
			_, err := f.c.RequeueDead(f.ctx, []string{unknown, "ffffff"}, reason)
			return err
		}, client.ErrNotFound, "task " + unknown + ", ffffff: not found"},
		{"requeue without a reason", func() error { _, err := f.c.RequeueDead(f.ctx, []string{unknown}, client.ActionOptions{}); return err }, client.ErrInvalidInput, "reason"},
		{"a batch with a bad run", func() error {
			_, err := f.c.TriggerMany(f.ctx, "one", []any{nil, json.RawMessage(`[]`)}, client.TriggerManyOptions{})
			return err
		}, client.ErrInvalidParams, "run 2: invalid params: want a JSON object"},
		{"a list limit out of range", func() error { _, err := f.c.ListRuns(f.ctx, client.RunFilter{Limit: 10001}); return err }, client.ErrInvalidInput, "10001"},
	}
	before := f.written()
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.want) || !contains(err, c.text) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.want, c.text)
		}
	}
	if n := f.written(); n != before {
		t.Fatalf("%d rows after the refusals, %d before", n, before)
	}
	if r, err := f.c.Run(f.ctx, run); err != nil || r.CancelRequestedAt != nil {
		t.Fatalf("run after the refusals: %+v, %v", r, err)
	}
}
