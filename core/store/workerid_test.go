package store_test

import (
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
)

// claimID is ClaimWorkerID(p, lease), failing the test on an error.
func (f *fixture) claimID(p store.Presence, lease time.Duration) store.WorkerClaim {
	f.t.Helper()
	c, err := f.s.ClaimWorkerID(f.ctx, p, lease)
	if err != nil {
		f.t.Fatalf("claim %s: %v", p.ID, err)
	}
	return c
}

// TestAWorkerIDIsClaimedFreeOrLapsedAndRefusedWhileItsHolderIsLive: mode
// 91. A free id is claimed; while its holder's heartbeat is younger than
// the lease a second claim writes nothing and names the holder; once it is
// older the claim takes the row over with a later instance token and
// clears the worker fields. Only the current instance's heartbeat and
// release match the row.
func TestAWorkerIDIsClaimedFreeOrLapsedAndRefusedWhileItsHolderIsLive(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := store.Presence{ID: "w", Role: "worker", Hostname: "h1", PID: 11, HealthAddr: "127.0.0.1:9001"}
	second := store.Presence{ID: "w", Role: "worker", Hostname: "h2", PID: 22}
	a := f.claimID(first, time.Minute)
	if a.Holder != nil || a.Since.IsZero() {
		t.Fatalf("claim of a free id: %+v, want claimed", a)
	}
	yes := true
	beat := first
	beat.Handlers, beat.Queue, beat.BrokerConnected = []string{"noop"}, "q", &yes
	if ok, err := f.s.RenewWorkerID(f.ctx, beat, a.Since); err != nil || !ok {
		t.Fatalf("the holder's heartbeat: %v, %v; want true", ok, err)
	}

	held := f.claimID(second, time.Minute)
	if held.Holder == nil || !held.Since.IsZero() {
		t.Fatalf("claim of a live id: %+v, want its holder", held)
	}
	if h := held.Holder; h.Hostname != "h1" || h.PID != 11 || !h.StartedAt.Equal(a.Since) || h.SecondsSinceSeen > 30 {
		t.Fatalf("holder %+v, want h1 pid 11 started at the first claim, just seen", h)
	}
	if ws, _ := f.listWorkers(time.Minute); ws["w"].PID != 11 || len(ws["w"].Handlers) != 1 {
		t.Fatalf("the refused claim wrote the row: %+v", ws["w"])
	}

	f.seenAgo("w", 2*time.Minute)
	b := f.claimID(second, time.Minute)
	if b.Holder != nil || !b.Since.After(a.Since) {
		t.Fatalf("claim of a lapsed id: %+v, want taken over with a token after %v", b, a.Since)
	}
	ws, _ := f.listWorkers(time.Minute)
	if w := ws["w"]; w.Hostname != "h2" || w.PID != 22 || w.Handlers != nil || w.Queue != nil || w.BrokerConnected != nil || w.HealthAddr != nil {
		t.Fatalf("row after the takeover: %+v, want h2's with the worker fields cleared", w)
	}

	if ok, err := f.s.RenewWorkerID(f.ctx, beat, a.Since); err != nil || ok {
		t.Fatalf("the old instance's heartbeat after the takeover: %v, %v; want false", ok, err)
	}
	if err := f.s.ReleaseWorkerID(f.ctx, "w", a.Since); err != nil {
		t.Fatal(err)
	}
	if ws, _ := f.listWorkers(time.Minute); ws["w"].PID != 22 {
		t.Fatalf("the old instance's release touched the new one's row: %+v", ws["w"])
	}
	if ok, err := f.s.RenewWorkerID(f.ctx, second, b.Since); err != nil || !ok {
		t.Fatalf("the new instance's heartbeat: %v, %v; want true", ok, err)
	}
	if err := f.s.ReleaseWorkerID(f.ctx, "w", b.Since); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM workers WHERE id = 'w'`); n != 0 {
		t.Fatalf("%d rows after the holder's release, want 0", n)
	}
	if c := f.claimID(first, time.Minute); c.Holder != nil {
		t.Fatalf("claim after a release: %+v, want claimed at once", c)
	}
}

// TestOfTwoConcurrentClaimsOfOneWorkerIDExactlyOneWins: mode 90. Two
// processes starting with one id at the same instant: both claims are
// made to wait behind a held transaction (one that locks a lapsed row, or
// one inserting the row), then released together. Exactly one claims the
// id; the other sees the winner as the holder, and the row is the
// winner's.
func TestOfTwoConcurrentClaimsOfOneWorkerIDExactlyOneWins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hold string // run in the held transaction
	}{
		{"a lapsed row", `SELECT 1 FROM workers WHERE id = 'w' FOR UPDATE`},
		{"a row being inserted", `INSERT INTO workers (id, role, hostname, pid, started_at, last_seen_at)
			VALUES ('w', 'worker', 'h0', 1, now() - interval '1 hour', now() - interval '1 hour')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.name == "a lapsed row" {
				f.sql(`INSERT INTO workers (id, role, hostname, pid) VALUES ('w', 'worker', 'h0', 1)`)
				f.seenAgo("w", time.Hour)
			}
			h := f.hold()
			f.exec(h, tc.hold)
			out := make([]store.WorkerClaim, 2)
			errs := make([]error, 2)
			done := make(chan struct{})
			go func() {
				defer close(done)
				together(2, func(i int) {
					out[i], errs[i] = f.s.ClaimWorkerID(f.ctx, store.Presence{ID: "w", Role: "worker", Hostname: "h", PID: 100 + i}, time.Minute)
				})
			}()
			f.waitBlocked(2)
			f.commit(h)
			<-done
			for i, err := range errs {
				if err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
			}
			winners := 0
			for _, c := range out {
				if c.Holder == nil {
					winners++
				}
			}
			if winners != 1 {
				t.Fatalf("%d of two concurrent claims won (%+v, %+v), want exactly 1", winners, out[0], out[1])
			}
			win, lose := out[0], out[1]
			if win.Holder != nil {
				win, lose = lose, win
			}
			ws, _ := f.listWorkers(time.Hour)
			if !lose.Holder.StartedAt.Equal(win.Since) || lose.Holder.PID != ws["w"].PID || !ws["w"].StartedAt.Equal(win.Since) {
				t.Fatalf("the loser sees %+v, the row is %+v; want both the winner's (token %v)", lose.Holder, ws["w"], win.Since)
			}
		})
	}
}
