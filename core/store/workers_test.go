package store_test

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
)

// seenAgo sets worker id's last heartbeat to ago before the database's
// now.
func (f *fixture) seenAgo(id string, ago time.Duration) {
	f.t.Helper()
	f.sql(`UPDATE workers SET last_seen_at = now() - $2::bigint * interval '1 millisecond' WHERE id = $1`, id, ago.Milliseconds())
}

func (f *fixture) record(p store.Presence) {
	f.t.Helper()
	if err := f.s.RecordPresence(f.ctx, p); err != nil {
		f.t.Fatalf("record %s: %v", p.ID, err)
	}
}

// listWorkers returns ListWorkers(within) keyed by id, and the ids in its
// order.
func (f *fixture) listWorkers(within time.Duration) (map[string]store.Worker, []string) {
	f.t.Helper()
	ws, err := f.s.ListWorkers(f.ctx, within)
	if err != nil {
		f.t.Fatalf("list workers: %v", err)
	}
	byID := map[string]store.Worker{}
	var ids []string
	for _, w := range ws {
		byID[w.ID] = w
		ids = append(ids, w.ID)
	}
	return byID, ids
}

// TestRecordPresenceStoresWhatAProcessReports: a worker's handlers, queue,
// broker state and health address come back as reported; another role's
// (TouchWorker) are null; a second report replaces them in the same row,
// keeps its start and moves its last-seen time (database clock).
func TestRecordPresenceStoresWhatAProcessReports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	yes, no := true, false
	f.record(store.Presence{ID: "w1", Role: "worker", Hostname: "h1", PID: 11, Handlers: []string{"http", "noop"},
		Queue: "flowforge.tasks", BrokerConnected: &yes, HealthAddr: "127.0.0.1:9101"})
	if err := f.s.TouchWorker(f.ctx, "s1", "scheduler", "h2", 22); err != nil {
		t.Fatal(err)
	}
	ws, _ := f.listWorkers(time.Minute)
	queue, health := "flowforge.tasks", "127.0.0.1:9101"
	want := map[string]store.Worker{
		"w1": {ID: "w1", Role: "worker", Hostname: "h1", PID: 11, Handlers: store.StringList{"http", "noop"},
			Queue: &queue, BrokerConnected: &yes, HealthAddr: &health},
		"s1": {ID: "s1", Role: "scheduler", Hostname: "h2", PID: 22},
	}
	for id, w := range want {
		got, ok := ws[id]
		// The times are the database's: compared apart below.
		got.StartedAt, got.LastSeenAt, got.SecondsSinceSeen = time.Time{}, time.Time{}, 0
		if !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("worker %s: %+v, want %+v", id, got, w)
		}
	}
	if len(ws) != 2 {
		t.Errorf("%d workers listed, want 2", len(ws))
	}

	f.seenAgo("w1", time.Hour)
	first := ws["w1"]
	f.record(store.Presence{ID: "w1", Role: "all", Hostname: "h1", PID: 11, Handlers: []string{"noop"}, BrokerConnected: &no})
	ws, _ = f.listWorkers(time.Minute)
	again := ws["w1"]
	if again.Role != "all" || !slices.Equal(again.Handlers, []string{"noop"}) || again.Queue != nil || again.BrokerConnected == nil || *again.BrokerConnected ||
		again.HealthAddr != nil {
		t.Errorf("after the second report: %+v", again)
	}
	if !again.StartedAt.Equal(first.StartedAt) || again.SecondsSinceSeen > 30 {
		t.Errorf("second report: started %v (first %v), seen %.1fs ago; want the start kept and seen just now", again.StartedAt, first.StartedAt, again.SecondsSinceSeen)
	}
	if n := f.count(`SELECT count(*) FROM workers WHERE id = 'w1'`); n != 1 {
		t.Errorf("%d rows for w1, want 1", n)
	}
}

// TestListWorkersShowsTheRecentlySeenNewestFirst: only processes seen
// within the window, the most recently seen first, each with how long ago
// (database clock) and its RUNNING tasks; at most 200.
func TestListWorkersShowsTheRecentlySeenNewestFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, w := range []struct {
		id  string
		ago time.Duration
	}{{"w-10s", 10 * time.Second}, {"w-1m", time.Minute}, {"w-5m", 5 * time.Minute}, {"w-2h", 2 * time.Hour}} {
		if err := f.s.TouchWorker(f.ctx, w.id, "worker", "h", 1); err != nil {
			t.Fatal(err)
		}
		f.seenAgo(w.id, w.ago)
	}
	f.apply(oneTask)
	f.claim(f.taskID(f.trigger("one", ""), "a"), "w-1m", time.Hour)
	f.claim(f.taskID(f.trigger("one", ""), "a"), "w-1m", time.Hour)
	f.runTask(f.taskID(f.trigger("one", ""), "a")) // claimed by w1 and finished: in flight nowhere

	ws, ids := f.listWorkers(10 * time.Minute)
	if want := []string{"w-10s", "w-1m", "w-5m"}; !slices.Equal(ids, want) {
		t.Fatalf("ListWorkers(10m) = %v, want %v", ids, want)
	}
	for id, want := range map[string]struct {
		ago      float64
		inFlight int
	}{"w-10s": {10, 0}, "w-1m": {60, 2}, "w-5m": {300, 0}} {
		w := ws[id]
		if math.Abs(w.SecondsSinceSeen-want.ago) > 5 || w.InFlight != want.inFlight {
			t.Errorf("%s: seen %.1fs ago, %d in flight; want about %.0fs, %d", id, w.SecondsSinceSeen, w.InFlight, want.ago, want.inFlight)
		}
	}
	if _, ids := f.listWorkers(30 * time.Second); !slices.Equal(ids, []string{"w-10s"}) {
		t.Errorf("ListWorkers(30s) = %v, want [w-10s]", ids)
	}

	f.sql(`INSERT INTO workers (id, role, hostname, pid) SELECT 'bulk-' || g, 'worker', 'h', g FROM generate_series(1, 250) g`)
	if _, ids := f.listWorkers(time.Hour); len(ids) != 200 {
		t.Errorf("ListWorkers over 254 processes: %d, want 200", len(ids))
	}
}

// TestLiveHandlersAreTheRecentWorkersHandlerSets: each handler a worker
// process (role worker or all) seen within the window registers, with the
// sorted queues of the workers that register it ("" for none), and how
// many worker processes were seen; other roles and stale workers count
// for nothing.
func TestLiveHandlersAreTheRecentWorkersHandlerSets(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if h, n, err := f.s.LiveHandlers(f.ctx, time.Minute); err != nil || len(h) != 0 || n != 0 {
		t.Fatalf("no workers: %v %d %v", h, n, err)
	}
	f.record(store.Presence{ID: "a", Role: "worker", Hostname: "h", PID: 1, Handlers: []string{"http", "noop"}, Queue: "q2"})
	f.record(store.Presence{ID: "b", Role: "all", Hostname: "h", PID: 2, Handlers: []string{"noop", "shell"}, Queue: "q1"})
	f.record(store.Presence{ID: "c", Role: "worker", Hostname: "h", PID: 3, Handlers: []string{"noop"}})
	f.record(store.Presence{ID: "d", Role: "worker", Hostname: "h", PID: 4, Handlers: []string{}}) // registers nothing
	// Claimed its id at start, handler set not reported yet: not seen.
	f.record(store.Presence{ID: "u", Role: "worker", Hostname: "h", PID: 7})
	f.record(store.Presence{ID: "e", Role: "worker", Hostname: "h", PID: 5, Handlers: []string{"stale"}, Queue: "q9"})
	f.seenAgo("e", time.Hour)
	f.record(store.Presence{ID: "s", Role: "scheduler", Hostname: "h", PID: 6, Handlers: []string{"sched-only"}})

	handlers, workers, err := f.s.LiveHandlers(f.ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"http": {"q2"}, "noop": {"", "q1", "q2"}, "shell": {"q1"}}
	if workers != 4 || len(handlers) != len(want) {
		t.Fatalf("LiveHandlers = %v, %d workers; want %v, 4 workers", handlers, workers, want)
	}
	for h, queues := range want {
		if !slices.Equal(handlers[h], queues) {
			t.Errorf("handler %s: queues %q, want %q", h, handlers[h], queues)
		}
	}
	if _, workers, err := f.s.LiveHandlers(f.ctx, 2*time.Hour); err != nil || workers != 5 {
		t.Errorf("LiveHandlers(2h): %d workers, %v; want 5 (the stale one too)", workers, err)
	}
}
