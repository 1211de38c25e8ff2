package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// limits reads every flow-control key by kind and key.
func (f *fixture) limits() map[string]store.FlowLimit {
	f.t.Helper()
	ls, err := f.s.ListLimits(f.ctx, 0)
	if err != nil {
		f.t.Fatalf("list limits: %v", err)
	}
	out := make(map[string]store.FlowLimit, len(ls))
	for _, l := range ls {
		out[l.Kind+"/"+l.Key] = l
	}
	return out
}

// setLimit sets (n > 0) or resets (n == 0) the operator's limit of key.
func (f *fixture) setLimit(kind, key string, n int) store.SetLimitResult {
	f.t.Helper()
	req := store.SetLimitRequest{Kind: kind, Key: key, Reason: "test", Actor: "tester"}
	if n > 0 {
		req.Limit = &n
	}
	res, err := f.s.SetLimit(f.ctx, req)
	if err != nil {
		f.t.Fatalf("set limit %s %s %d: %v", kind, key, n, err)
	}
	return res
}

// holders lists the task runs of ids that hold a slot (admitted: an
// outbox row, not finished).
func (f *fixture) holders(ids []uuid.UUID) []uuid.UUID {
	f.t.Helper()
	var out []uuid.UUID
	for _, id := range ids {
		if st, _ := f.state(id); st == core.TaskReady && f.outboxRows(id) == 1 {
			out = append(out, id)
		}
	}
	return out
}

// TestListLimitsShowsHoldersWaitersAndTheOldestWait: a concurrency key
// with limit 2 over 5 tasks shows 2 in use and 3 waiting, a rate key its
// starts in the window and its waiters, the hotter key first.
func TestListLimitsShowsHoldersWaitersAndTheOldestWait(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: \"'customer-' + params.c\", limit: 2}}\n")
	f.apply("name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 1, per: 1m}}\n")
	f.triggerN("limited", "a", 5, "42")
	f.triggerN("rated", "a", 3, "x")
	f.advance()
	time.Sleep(20 * time.Millisecond)
	f.admit()
	ls, err := f.s.ListLimits(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Key != "customer-42" || ls[1].Key != "api" {
		t.Fatalf("limits %+v, want customer-42 (3 waiting) then api (2 waiting)", ls)
	}
	c, r := ls[0], ls[1]
	if c.Kind != store.FlowConcurrency || c.Limit != 2 || c.DefinitionLimit != 2 || c.Operator() || c.InUse != 2 || c.Waiting != 3 || c.Per != 0 {
		t.Errorf("concurrency key %+v, want limit 2 (definition), 2 in use, 3 waiting", c)
	}
	if c.OldestWaitSeconds <= 0.01 || c.OldestWaitSeconds > 60 {
		t.Errorf("oldest wait %v s, want a few milliseconds", c.OldestWaitSeconds)
	}
	if r.Kind != store.FlowRate || r.Limit != 1 || r.InUse != 1 || r.Waiting != 2 || r.Per != time.Minute {
		t.Errorf("rate key %+v, want limit 1 per 1m, 1 start in the window, 2 waiting", r)
	}
	if ls, _ := f.s.ListLimits(f.ctx, 1); len(ls) != 1 {
		t.Errorf("a limit of 1 gave %d rows", len(ls))
	}
}

// TestALoweredLimitAdmitsNoneUntilTheHoldersAreUnderIt: limit 3, three
// holders; the operator lowers it to 1: the holders keep running, and the
// admission admits none until one holder is left and it finished; a reset
// restores the definition's 3; each change is audited.
func TestALoweredLimitAdmitsNoneUntilTheHoldersAreUnderIt(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 3}}\n")
	ids := f.triggerN("limited", "a", 6, "x")
	f.advance()
	f.admit()
	res := f.setLimit(store.FlowConcurrency, "k", 1)
	if len(res.Changes) != 1 || *res.Changes[0].Old != 3 || res.Changes[0].New != 1 {
		t.Fatalf("changes %+v, want 3 -> 1", res.Changes)
	}
	if l := f.limits()["concurrency/k"]; l.Limit != 1 || !l.Operator() || l.DefinitionLimit != 3 || l.InUse != 3 {
		t.Fatalf("after set: %+v, want limit 1 (set), definition 3, 3 in use", l)
	}
	held := f.holders(ids)
	for i, h := range held {
		if n := f.admit().Dispatched; n != 0 {
			t.Fatalf("with %d holders and limit 1 the admission dispatched %d", len(held)-i, n)
		}
		f.runTask(h)
	}
	if n := f.admit().Dispatched; n != 1 {
		t.Fatalf("with no holder the admission dispatched %d, want 1", n)
	}
	f.setLimit("", "k", 0)
	if l := f.limits()["concurrency/k"]; l.Limit != 3 || l.Operator() {
		t.Fatalf("after reset: %+v, want the definition's 3", l)
	}
	if n := f.admit().Dispatched; n != 2 {
		t.Fatalf("after the reset the admission dispatched %d, want 2", n)
	}
	ev, err := f.s.LimitEvents(f.ctx, "", "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 || *ev[1].OldLimit != 3 || *ev[1].NewLimit != 1 || *ev[0].OldLimit != 1 || *ev[0].NewLimit != 3 ||
		ev[0].Actor != "tester" || ev[0].Reason != "test" {
		t.Fatalf("audit %+v, want 3 -> 1 then 1 -> 3 by tester", ev)
	}
}

// TestSetLimitCreatesAConcurrencyKeyBeforeItsLoad: a limit set for a key
// no task waited for yet is kept when tasks arrive with their
// definition's (higher) limit.
func TestSetLimitCreatesAConcurrencyKeyBeforeItsLoad(t *testing.T) {
	f := newFixture(t)
	res := f.setLimit(store.FlowConcurrency, "k", 1)
	if len(res.Changes) != 1 || res.Changes[0].Old != nil || res.Changes[0].New != 1 {
		t.Fatalf("changes %+v, want a new key with limit 1", res.Changes)
	}
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 5}}\n")
	f.triggerN("limited", "a", 3, "x")
	f.advance()
	if n := f.admit().Dispatched; n != 1 {
		t.Fatalf("the admission dispatched %d, want the operator's 1", n)
	}
	if l := f.limits()["concurrency/k"]; l.Limit != 1 || l.DefinitionLimit != 5 || l.Waiting != 2 {
		t.Fatalf("key %+v, want limit 1 (set) over the definition's 5, 2 waiting", l)
	}
	// The same limit again changes nothing and audits nothing.
	events := f.count(`SELECT count(*) FROM flow_limit_events`)
	if res := f.setLimit(store.FlowConcurrency, "k", 1); len(res.Changes) != 1 || !res.Changes[0].Unchanged || res.Changes[0].New != 1 {
		t.Fatalf("setting the same limit again: %+v, want one unchanged change", res.Changes)
	}
	if n := f.count(`SELECT count(*) FROM flow_limit_events`); n != events {
		t.Fatalf("setting the same limit again wrote %d audit rows", n-events)
	}
}

// TestSetLimitRefusesBadInput: each bad request is refused with its
// sentinel, and writes nothing.
func TestSetLimitRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	f.apply("name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 2, per: 1s}}\n")
	f.triggerN("rated", "a", 3, "x")
	f.advance()
	f.admit()
	n := func(i int) *int { return &i }
	for _, c := range []struct {
		name string
		req  store.SetLimitRequest
		want error
		says string
	}{
		{"no reason", store.SetLimitRequest{Kind: "rate", Key: "api", Limit: n(1)}, core.ErrBadReason, "reason"},
		{"limit 0", store.SetLimitRequest{Kind: "rate", Key: "api", Limit: n(0), Reason: "r"}, store.ErrBadLimit, "1 to 10000"},
		{"rate limit too high", store.SetLimitRequest{Key: "api", Limit: n(core.MaxRateLimit + 1), Reason: "r"}, store.ErrBadLimit, "rate limit"},
		{"unknown kind", store.SetLimitRequest{Kind: "speed", Key: "api", Limit: n(1), Reason: "r"}, store.ErrBadLimit, "speed"},
		{"unknown key", store.SetLimitRequest{Key: "nope", Limit: n(1), Reason: "r"}, store.ErrNotFound, "nope"},
		{"reset of an unknown key", store.SetLimitRequest{Kind: "concurrency", Key: "nope", Reason: "r"}, store.ErrNotFound, `reset limit of "nope"`},
		{"an empty key of any kind", store.SetLimitRequest{Key: "", Limit: n(2), Reason: "r"}, store.ErrBadLimit, "the key is empty"},
		{"rate key without a row", store.SetLimitRequest{Kind: "rate", Key: "nope", Limit: n(1), Reason: "r"}, store.ErrNotFound, "once a task using it has waited"},
		{"kind the key lacks", store.SetLimitRequest{Kind: "concurrency", Key: "api", Reason: "r"}, store.ErrNotFound, "api"},
		{"a reset with no operator's limit", store.SetLimitRequest{Key: "api", Reason: "r"}, store.ErrNotFound, "nothing to reset"},
		{"an empty new key", store.SetLimitRequest{Kind: "concurrency", Key: "", Limit: n(2), Reason: "r"}, store.ErrBadLimit, "the key is empty"},
		{"a new key no trigger could give", store.SetLimitRequest{Kind: "concurrency", Key: strings.Repeat("y", core.MaxFlowKeyLength+1), Limit: n(2), Reason: "r"}, store.ErrBadLimit, "longer than the limit of 256"},
		{"a new key with NUL", store.SetLimitRequest{Kind: "concurrency", Key: "a\x00b", Limit: n(2), Reason: "r"}, store.ErrBadLimit, "without NUL"},
		{"a new run key without its workflow", store.SetLimitRequest{Kind: "run", Key: "brand-new", Limit: n(2), Reason: "r"}, store.ErrBadLimit, "<workflow>/<key>"},
		{"a new run key of a workflow never applied", store.SetLimitRequest{Kind: "run", Key: "ratd/tenant-a", Limit: n(2), Reason: "r"}, store.ErrNotFound, `no workflow "ratd"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.s.SetLimit(f.ctx, c.req)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want %v saying %q", err, c.want, c.says)
			}
		})
	}
	if k := f.count(`SELECT count(*) FROM flow_limit_events`); k != 0 {
		t.Fatalf("%d audit rows after refusals, want 0", k)
	}
	if l := f.limits()["rate/api"]; l.Operator() || l.Limit != 2 {
		t.Fatalf("key %+v changed by a refusal", l)
	}
	f.setLimit("", "api", 1)
	if l := f.limits()["rate/api"]; l.Limit != 1 || l.Per != time.Second {
		t.Fatalf("key %+v, want limit 1 per 1s", l)
	}
	if res := f.setLimit(store.FlowRun, "rated/tenant-a", 2); len(res.Changes) != 1 || res.Changes[0].New != 2 {
		t.Fatalf("changes %+v, want a new run key of the applied workflow with limit 2", res.Changes)
	}
}

// TestAResetForgetsAKeyNoTaskUses: a reset of a concurrency key that no
// task run holds or waits for (here one the operator created) drops the
// key instead of calling the operator's limit the definitions' (there is
// no definition behind it), audited with no new limit; a key with
// waiters keeps its row and goes back to its definition's limit.
func TestAResetForgetsAKeyNoTaskUses(t *testing.T) {
	f := newFixture(t)
	f.setLimit(store.FlowConcurrency, "made-up", 2)
	res, err := f.s.SetLimit(f.ctx, store.SetLimitRequest{Key: "made-up", Reason: "done", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 1 || !res.Changes[0].Forgotten || *res.Changes[0].Old != 2 {
		t.Fatalf("changes %+v, want the key forgotten from limit 2", res.Changes)
	}
	if _, ok := f.limits()["concurrency/made-up"]; ok {
		t.Fatal("the reset key is still listed")
	}
	if n := f.count(`SELECT count(*) FROM flow_limit_events WHERE key = 'made-up' AND old_limit = 2 AND new_limit IS NULL AND reason = 'done'`); n != 1 {
		t.Fatalf("%d audit rows of the forgetting, want 1", n)
	}
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 5}}\n")
	f.triggerN("limited", "a", 1, "x")
	f.admit()
	f.setLimit(store.FlowConcurrency, "k", 1)
	res, err = f.s.SetLimit(f.ctx, store.SetLimitRequest{Key: "k", Reason: "back", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 1 || res.Changes[0].Forgotten || res.Changes[0].New != 5 {
		t.Fatalf("changes %+v, want key k back at its definition's 5", res.Changes)
	}
}
