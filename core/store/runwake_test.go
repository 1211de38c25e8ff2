package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

// finishedRuns triggers n runs of twoRoots in one TriggerMany, claims
// their tasks a in one ClaimMany and returns the runs and the FinishMany
// requests that succeed those tasks, one per run (each run stays open: its
// task b is still READY).
func (f *fixture) finishedRuns(n int) ([]uuid.UUID, []store.FinishRequest) {
	f.t.Helper()
	runs, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "two", Params: make([]json.RawMessage, n), Actor: "test"})
	if err != nil {
		f.t.Fatal(err)
	}
	claims := make([]store.ClaimRequest, 0, n)
	rows, err := f.db.QueryContext(f.ctx, `SELECT id, fencing_token FROM task_runs WHERE run_id = ANY ($1::uuid[]) AND task_name = 'a' ORDER BY id`, uuidTexts(runs))
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var c store.ClaimRequest
		if err := rows.Scan(&c.ID, &c.Token); err != nil {
			f.t.Fatal(err)
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil || len(claims) != n {
		f.t.Fatalf("read %d tasks of %d runs: %v", len(claims), n, err)
	}
	res, err := f.s.ClaimMany(f.ctx, claims, "w1", time.Minute)
	if err != nil {
		f.t.Fatal(err)
	}
	reqs := make([]store.FinishRequest, n)
	for i, r := range res {
		if !r.OK {
			f.t.Fatalf("claim %d lost", i)
		}
		reqs[i] = store.FinishRequest{ID: r.Task.ID, Token: r.Task.FencingToken, Outcome: store.OutcomeSucceeded, WorkerID: "w1"}
	}
	return runs, reqs
}

// uuidTexts is ids as text, for a uuid[] parameter through database/sql.
func uuidTexts(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// TestAFinishOverMoreRunsThanOnePayloadNamesThemAll: modes 56 and 59. One
// FinishMany over tasks of 250 runs (more than one payload holds) names
// every run, in the payloads of its one statement, and asks for no sweep.
func TestAFinishOverMoreRunsThanOnePayloadNamesThemAll(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f, url := notifyFixture(t)
	f.apply(twoRoots)
	const n = 250
	runs, reqs := f.finishedRuns(n)
	l := listenOn(t, url, store.TasksChannel)
	res, err := f.s.FinishMany(f.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.OK {
			t.Fatalf("finish %d: %+v", i, r)
		}
	}
	got, payloads, anyRun := namedWithin(t, l, runs, 10*time.Second)
	if len(got) != n {
		t.Fatalf("a finish over %d runs named %d of them (AnyRun sent: %v); want every run named, each once, and no AnyRun", n, len(got), anyRun)
	}
	want := store.RunWake{Runs: runs}.Encode()
	slices.Sort(payloads)
	slices.Sort(want)
	if !slices.Equal(payloads, want) {
		t.Fatalf("the finish sent %d payloads %.80q; RunWake.Encode sends %d %.80q", len(payloads), payloads, len(want), want)
	}
}

// namedWithin gathers, until every run of runs is named or d has passed,
// the runs of runs that notifications name (each once), the payloads that
// named them, and whether an AnyRun payload came (another schema's write
// may send one too: a test that finds one must also find a run of its own
// missing).
func namedWithin(t *testing.T, l *store.Listener, runs []uuid.UUID, d time.Duration) (map[uuid.UUID]bool, []string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	got, anyRun := map[uuid.UUID]bool{}, false
	var payloads []string
	for len(got) < len(runs) {
		items, err := l.Wait(ctx)
		if err != nil {
			break
		}
		mine := false
		for _, it := range items {
			if it == store.AnyRun {
				anyRun = true
			} else if id, err := uuid.Parse(it); err == nil && slices.Contains(runs, id) {
				got[id], mine = true, true
			}
		}
		if mine {
			payloads = append(payloads, strings.Join(items, ","))
		}
	}
	return got, payloads, anyRun
}

// TestTheFinishSpellsRunWakesAsEncodeDoes: mode 59. The finish's SQL
// spelling of the TasksChannel payload (runWakeSQL, with the bounds qFinish
// binds) returns, over the same runs, exactly the payloads RunWake.Encode
// returns: for no run, runs given twice, as many runs as one payload holds
// and one more, and as many as RunWakePayloadsMax payloads hold and one
// more (AnyRun on both sides).
func TestTheFinishSpellsRunWakesAsEncodeDoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := func(n int) []uuid.UUID {
		out := make([]uuid.UUID, n)
		for i := range out {
			out[i] = uuid.New()
		}
		return out
	}
	a, b := uuid.New(), uuid.New()
	most := store.RunWakePerPayload * store.RunWakePayloadsMax
	for _, tc := range []struct {
		name string
		runs []uuid.UUID
	}{
		{"no run", nil},
		{"runs given twice", []uuid.UUID{b, a, b, a}},
		{"one payload full", ids(store.RunWakePerPayload)},
		{"one run more than a payload", ids(store.RunWakePerPayload + 1)},
		{"every payload full", ids(most)},
		{"one run more than the payloads hold", ids(most + 1)},
	} {
		sql := f.payloads(store.QRunWake, store.RunWakeArgs(tc.runs)...)
		want := store.RunWake{Runs: tc.runs}.Encode()
		if !slices.Equal(sql, want) {
			t.Errorf("%s: the SQL spelling sends %d payloads %.80q, Encode %d %.80q", tc.name, len(sql), sql, len(want), want)
		}
	}
}

// payloads returns the text column of query's rows, in order.
func (f *fixture) payloads(query string, args ...any) []string {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, query, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestARunWakeIsReadAsItWasSent: each payload RunWake.Encode sends stays
// under PostgreSQL's 8000-byte limit, and DecodeRunWake reads the payloads
// back as the runs sent, each once; AnyRun (asked for, or beyond
// RunWakePayloadsMax payloads) reads back as a sweep request, and so does
// a payload that names no run id (an empty one, garbage). An admission
// round asked for (Admit) reads back as Admit, never as a sweep: it costs
// the scheduler no pass.
func TestARunWakeIsReadAsItWasSent(t *testing.T) {
	t.Parallel()
	ids := func(n int) []uuid.UUID {
		out := make([]uuid.UUID, n)
		for i := range out {
			out[i] = uuid.New()
		}
		return out
	}
	most := store.RunWakePerPayload * store.RunWakePayloadsMax
	for _, tc := range []struct {
		name     string
		sent     store.RunWake
		payloads int
		anyRun   bool
	}{
		{"no run", store.RunWake{}, 0, false},
		{"one run", store.RunWake{Runs: ids(1)}, 1, false},
		{"one run more than a payload", store.RunWake{Runs: ids(store.RunWakePerPayload + 1)}, 2, false},
		{"every payload full", store.RunWake{Runs: ids(most)}, store.RunWakePayloadsMax, false},
		{"one run more than the payloads hold", store.RunWake{Runs: ids(most + 1)}, 1, true},
		{"a sweep asked for", store.RunWake{Runs: ids(2), AnyRun: true}, 1, true},
		{"an admission round", store.RunWake{Admit: true}, 1, false},
		{"runs and an admission round", store.RunWake{Runs: ids(3), Admit: true}, 2, false},
	} {
		payloads := tc.sent.Encode()
		if len(payloads) != tc.payloads {
			t.Errorf("%s: %d payloads, want %d", tc.name, len(payloads), tc.payloads)
		}
		var got store.RunWake
		for _, p := range payloads {
			if len(p) >= 8000 {
				t.Errorf("%s: a payload of %d bytes; PostgreSQL refuses 8000 or more", tc.name, len(p))
			}
			w := store.DecodeRunWake(strings.Split(p, ","))
			got.Runs, got.AnyRun, got.Admit = append(got.Runs, w.Runs...), got.AnyRun || w.AnyRun, got.Admit || w.Admit
		}
		want := tc.sent.Runs
		if tc.anyRun {
			want = nil
		}
		if got.AnyRun != tc.anyRun || !sameRuns(got.Runs, want) || got.Admit != (tc.sent.Admit && !tc.anyRun) {
			t.Errorf("%s: read back %d runs, AnyRun %v, Admit %v; want the %d runs sent, AnyRun %v, Admit %v",
				tc.name, len(got.Runs), got.AnyRun, got.Admit, len(want), tc.anyRun, tc.sent.Admit && !tc.anyRun)
		}
	}
	for _, items := range [][]string{{""}, {store.AnyRun}, {"not-a-run"}} {
		if w := store.DecodeRunWake(items); !w.AnyRun || len(w.Runs) != 0 {
			t.Errorf("DecodeRunWake(%q) = %+v; want a sweep request", items, w)
		}
	}
}

// sameRuns reports whether a and b hold the same runs, each once in a.
func sameRuns(a, b []uuid.UUID) bool {
	cmp := func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) }
	a, b = slices.SortedFunc(slices.Values(a), cmp), slices.Compact(slices.SortedFunc(slices.Values(b), cmp))
	return slices.EqualFunc(a, b, func(x, y uuid.UUID) bool { return x == y })
}
