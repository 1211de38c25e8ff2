package store_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// listed returns the ids ListRuns returns for filter, newest first.
func (f *fixture) listed(filter store.RunFilter) []uuid.UUID {
	f.t.Helper()
	runs, err := f.s.ListRuns(f.ctx, filter)
	if err != nil {
		f.t.Fatalf("list runs %+v: %v", filter, err)
	}
	out := []uuid.UUID{}
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// TestListRunsMatchesAParamAsAStringOrAsJSON: a value matches the param
// as a JSON string, and also as the JSON value it spells; a missing key
// never matches; several filters must all match.
func TestListRunsMatchesAParamAsAStringOrAsJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pruneOne)
	run := map[string]uuid.UUID{}
	for _, p := range []struct{ name, params string }{
		{"n string", `{"n": "3", "date": "2026-11-30"}`},
		{"n number", `{"n": 3}`},
		{"n decimal", `{"n": 3.0, "date": "2026-11-30"}`},
		{"n x", `{"n": "x"}`},
		{"n null", `{"n": null}`},
		{"n empty", `{"n": ""}`},
		{"n quoted", `{"n": "\"3\""}`},
		{"flag bool", `{"flag": true}`},
		{"flag string", `{"flag": "true"}`},
		{"cfg", `{"cfg": {"a": 1, "b": [1, 2]}}`},
		{"dotted", `{"a.b": "1", "a": {"b": "1"}}`},
		{"none", `{}`},
	} {
		run[p.name] = f.trigger("prune-one", p.params)
	}
	cases := []struct {
		filters []string
		want    []string
	}{
		{[]string{"n=3"}, []string{"n string", "n number", "n decimal"}},
		{[]string{`n="3"`}, []string{"n string", "n quoted"}},
		{[]string{"n=x"}, []string{"n x"}},
		{[]string{"n=null"}, []string{"n null"}},
		{[]string{"n="}, []string{"n empty"}},
		{[]string{"flag=true"}, []string{"flag bool", "flag string"}},
		{[]string{`cfg={"b": [1, 2], "a": 1}`}, []string{"cfg"}},
		{[]string{`cfg={"a": 1}`}, nil}, // equality, not containment
		{[]string{"a.b=1"}, []string{"dotted"}},
		{[]string{"n=3", "date=2026-11-30"}, []string{"n string", "n decimal"}},
		{[]string{"n=3", "date=2026-12-01"}, nil},
		{[]string{"missing=3"}, nil},
		{[]string{"missing=x"}, nil}, // one candidate: a missing key must not match its absent second
	}
	for _, tc := range cases {
		var filter store.RunFilter
		for _, kv := range tc.filters {
			p, err := core.ParseParamFilter(kv)
			if err != nil {
				t.Fatal(err)
			}
			filter.Params = append(filter.Params, p)
		}
		got := f.listed(filter)
		want := []uuid.UUID{}
		for _, name := range tc.want {
			want = append(want, run[name])
		}
		slices.SortFunc(got, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		slices.SortFunc(want, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		if !slices.Equal(got, want) {
			t.Errorf("--param %v: %v, want %v", tc.filters, got, tc.want)
		}
	}
}

// TestListRunsKeepsTheWindowAndRefusesOneThatHoldsNoTime: --since and
// --until as times and as ages (database clock), inclusive, with the other
// filters; an inverted window, a bound with both forms, a negative age and
// an empty param key are ErrBadRunFilter.
func TestListRunsKeepsTheWindowAndRefusesOneThatHoldsNoTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pruneOne)
	h3, h2, h1, now := f.trigger("prune-one", ""), f.trigger("prune-one", ""), f.trigger("prune-one", ""), f.trigger("prune-one", "")
	f.backdate(h3, 3*time.Hour)
	f.backdate(h2, 2*time.Hour)
	f.backdate(h1, time.Hour)
	at := func(id uuid.UUID) *time.Time { c := f.run(id).CreatedAt; return &c }
	ago := func(d time.Duration) store.TimeBound { return store.TimeBound{Ago: d} }
	cases := []struct {
		name         string
		since, until store.TimeBound
		want         []uuid.UUID
	}{
		{"since an age", ago(150 * time.Minute), store.TimeBound{}, []uuid.UUID{now, h1, h2}},
		{"until an age", store.TimeBound{}, ago(30 * time.Minute), []uuid.UUID{h1, h2, h3}},
		{"both ages", ago(150 * time.Minute), ago(30 * time.Minute), []uuid.UUID{h1, h2}},
		{"times, inclusive", store.TimeBound{At: at(h2)}, store.TimeBound{At: at(h1)}, []uuid.UUID{h1, h2}},
		{"one instant", store.TimeBound{At: at(h2)}, store.TimeBound{At: at(h2)}, []uuid.UUID{h2}},
		{"a time and an age", store.TimeBound{At: at(h3)}, ago(90 * time.Minute), []uuid.UUID{h2, h3}},
		{"nothing inside", ago(10 * time.Minute), ago(5 * time.Minute), []uuid.UUID{}},
	}
	for _, tc := range cases {
		if got := f.listed(store.RunFilter{Since: tc.since, Until: tc.until}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := f.listed(store.RunFilter{Since: ago(150 * time.Minute), Limit: 1}); !slices.Equal(got, []uuid.UUID{now}) {
		t.Errorf("since with a limit: %v, want %v", got, now)
	}
	bad := []struct {
		name   string
		filter store.RunFilter
		want   string
	}{
		{"inverted ages", store.RunFilter{Since: ago(time.Hour), Until: ago(2 * time.Hour)}, "is after until"},
		{"inverted times", store.RunFilter{Since: store.TimeBound{At: at(h1)}, Until: store.TimeBound{At: at(h2)}}, "is after until"},
		{"inverted mixed", store.RunFilter{Since: ago(time.Minute), Until: store.TimeBound{At: at(h2)}}, "is after until"},
		{"both forms", store.RunFilter{Since: store.TimeBound{At: at(h1), Ago: time.Hour}}, "since has both a time and an age"},
		{"negative age", store.RunFilter{Until: ago(-time.Hour)}, "until: a negative age"},
		{"empty key", store.RunFilter{Params: []core.ParamFilter{{Key: "", Value: "x"}}}, "the key is empty"},
	}
	for _, tc := range bad {
		runs, err := f.s.ListRuns(f.ctx, tc.filter)
		if !errors.Is(err, store.ErrBadRunFilter) || !strings.Contains(err.Error(), tc.want) || runs != nil {
			t.Errorf("%s: %v (%d runs), want ErrBadRunFilter saying %q", tc.name, err, len(runs), tc.want)
		}
	}
}

// qRunHistory inserts $2 runs of workflow $1 (no task runs), one a second
// back from now, a tenth of them of another workflow name, each with a
// param n.
const qRunHistory = `
INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, params, created_at, finished_at)
SELECT gen_random_uuid(), w.id, CASE WHEN g % 10 = 0 THEN 'other' ELSE w.name END, w.version, 'SUCCEEDED',
       jsonb_build_object('n', g % 100), now() - g * interval '1 second', now() - g * interval '1 second'
  FROM workflows w, generate_series(1, $2::int) g
 WHERE w.id = $1`

// TestEveryRunListFilterWalksAnIndex: on 100,000 runs (ANALYZEd), every
// shape of run list's query, custom plan or generic (a prepared statement
// may switch to it after five executions), reads workflow_runs through an
// index and never scans it: no filter, a window of ages or times, a
// workflow, params (checked on the runs the walk meets), paging.
func TestEveryRunListFilterWalksAnIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wf := f.apply(pruneOne)
	if _, err := f.db.ExecContext(f.ctx, qRunHistory, wf.ID, 100000); err != nil {
		t.Fatalf("build the history: %v", err)
	}
	if _, err := f.db.ExecContext(f.ctx, "ANALYZE workflow_runs"); err != nil {
		t.Fatal(err)
	}
	conn, err := f.db.Conn(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	const none = `'{}', '{}', '{}'`
	shapes := map[string]string{
		"no filter":     `'', '', NULL, NULL, NULL, NULL, NULL, ` + none + `, 50`,
		"since an age":  `'', '', NULL, NULL, 7200000000, NULL, NULL, ` + none + `, 50`,
		"window":        `'', '', NULL, now() - interval '5 hours', NULL, NULL, 3600000000, ` + none + `, 50`,
		"workflow":      `'prune-one', '', NULL, NULL, 7200000000, NULL, NULL, ` + none + `, 50`,
		"state, before": `'', 'SUCCEEDED', now() - interval '1 hour', NULL, NULL, NULL, NULL, ` + none + `, 50`,
		"params":        `'', '', NULL, NULL, 7200000000, NULL, NULL, '{n}', '{"\"7\""}', '{7}', 50`,
	}
	tables := map[string]bool{"workflow_runs": true}
	for name, args := range shapes {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainListRuns(t, conn, mode, args)
			scans := seqScans(plan, "", tables)
			walk := nodeTypes(plan, 1)
			walked := strings.Contains(walk, "Index Scan on workflow_runs using workflow_runs_created") ||
				strings.Contains(walk, "Index Scan on workflow_runs using workflow_runs_workflow_created")
			if len(scans) > 0 || !walked {
				t.Errorf("run list %s (%s) does not walk an index:\n  %s\nplan:\n%s", name, mode, strings.Join(scans, "\n  "), nodeTypes(plan, 1))
			} else if testing.Verbose() {
				t.Logf("run list %s (%s):\n%s", name, mode, nodeTypes(plan, 1))
			}
		}
	}
}

// explainListRuns returns the plan of qListRuns with args (SQL literals)
// under plan_cache_mode mode, through conn.
func explainListRuns(t *testing.T, conn *sql.Conn, mode, args string) planNode {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{"SET plan_cache_mode = " + mode, "PREPARE list_runs AS " + store.ListRunsQuery()} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, "DEALLOCATE list_runs; RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
		}
	}()
	var js string
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE list_runs(%s)", args)).Scan(&js); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("decode the plan (%v): %s", err, js)
	}
	return plans[0].Plan
}
