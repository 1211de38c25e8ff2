package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// TestApplyWorkflowChecksTheWholeFileBeforeItStores: a file that does not
// parse, a bad definition, params its handler's check refuses and a
// handler live workers contradict are ErrInvalidInput naming the source,
// and store nothing; --strict's refusal is ErrConflict; a good file is
// stored once, then unchanged.
func TestApplyWorkflowChecksTheWholeFileBeforeItStores(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	noX := func(handler string, params json.RawMessage) error {
		if strings.Contains(string(params), `"x"`) {
			return fmt.Errorf("handler %s: params: json: unknown field %q", handler, "x")
		}
		return nil
	}
	opts := client.ApplyOptions{Source: "w.yaml", CheckParams: noX, Actor: "api:ci"}
	bad := []struct{ name, src, want string }{
		{"not YAML", "name: [", "w.yaml: "},
		{"unknown field", "name: w\ntaks: []\n", `w.yaml: `},
		{"a cycle", "name: w\ntasks:\n  - {name: a, handler: noop, depends_on: [b]}\n  - {name: b, handler: noop, depends_on: [a]}\n", "cycle"},
		{"params refused", "name: w\ntasks:\n  - {name: a, handler: noop, params: {x: 1}}\n", `w.yaml: task a: handler noop: params: json: unknown field "x"`},
	}
	before := f.count(`SELECT count(*) FROM workflows`)
	for _, c := range bad {
		_, err := f.c.ApplyWorkflow(f.ctx, []byte(c.src), opts)
		if !errors.Is(err, client.ErrInvalidInput) || !contains(err, c.want) {
			t.Errorf("%s: %v, want ErrInvalidInput naming %q", c.name, err, c.want)
		}
	}
	const mail = "name: mail\ntasks:\n  - {name: send, handler: sendmail}\n"
	strict := opts
	strict.Handlers.Strict = true
	if _, err := f.c.ApplyWorkflow(f.ctx, []byte(mail), strict); !errors.Is(err, client.ErrConflict) || !contains(err, "no worker has been seen") {
		t.Errorf("strict with no worker: %v, want ErrConflict", err)
	}
	if err := f.s.RecordPresence(f.ctx, store.Presence{ID: "w1", Role: "worker", Hostname: "h", PID: 1, Handlers: []string{"noop"}, Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.c.ApplyWorkflow(f.ctx, []byte(mail), client.ApplyOptions{Source: "w.yaml", Handlers: client.HandlerPolicy{AllowHint: "set allow_unknown_handler=true"}})
	if !errors.Is(err, client.ErrInvalidInput) || !contains(err, "w.yaml: task send: handler sendmail is registered by none of the 1 workers") || !contains(err, "set allow_unknown_handler=true to store it anyway") {
		t.Errorf("unserved handler: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM workflows`); n != before {
		t.Fatalf("%d workflow versions stored by refused applies", n-before)
	}
	const nap = "name: nap\ntasks:\n  - {name: a, handler: noop}\n"
	res, err := f.c.ApplyWorkflow(f.ctx, []byte(nap), opts)
	if err != nil || !res.Created || res.Version != 1 || res.Tasks != 1 || len(res.Warnings) != 0 || res.Schedules == nil {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	if res, err = f.c.ApplyWorkflow(f.ctx, []byte(nap), opts); err != nil || res.Created || res.Version != 1 {
		t.Fatalf("second apply: %+v, %v", res, err)
	}
}
