package supervisor

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// An ID names one live process: the workers row it heartbeats, the
// worker_id of its leases and history, the consumer tag. A process claims
// its ID at start (store.ClaimWorkerID, one statement: of two processes
// starting with one ID at the same instant exactly one wins), heartbeats
// under the claim's instance token (store.RenewWorkerID) and releases the
// row when it stops. See docs/operating.md, "One process per --id".

// IDInUseError is Run's error when a live process holds Config.ID: its row
// was heartbeated while this process waited (at most Config.IDLease) for
// it to lapse. ffctl exits 2 with it.
type IDInUseError struct {
	ID     string
	Holder store.Worker // the holder's row as it last reported itself
	Lease  time.Duration
}

func (e *IDInUseError) Error() string {
	h := e.Holder
	return fmt.Sprintf("id %q is in use by a live process: %s pid %d on host %s, started %s, last seen %s (%.1fs ago); "+
		"give this process another --id, or stop that one (an id stays held until %s after its holder's last heartbeat)",
		e.ID, h.Role, h.PID, h.Hostname, h.StartedAt.UTC().Format(time.RFC3339), h.LastSeenAt.UTC().Format(time.RFC3339Nano),
		h.SecondsSinceSeen, e.Lease)
}

// IDTakenOverError is Run's error when another process took this one's ID
// over (this one's heartbeat had lapsed: its database was out of reach for
// longer than Config.IDLease). The process stops as on its first signal:
// two live processes never keep one ID.
type IDTakenOverError struct {
	ID     string
	Holder store.Worker // the process that holds the ID now
}

func (e *IDTakenOverError) Error() string {
	h := e.Holder
	return fmt.Sprintf("id %q was taken over by %s pid %d on host %s at %s, after this process's heartbeat lapsed; stopped",
		e.ID, h.Role, h.PID, h.Hostname, h.StartedAt.UTC().Format(time.RFC3339Nano))
}

// presenceBase is what every heartbeat of the process reports, before the
// worker's part.
func (p *process) presenceBase() store.Presence {
	return store.Presence{ID: p.cfg.ID, Role: string(p.cfg.Role), Hostname: p.host, PID: os.Getpid(), HealthAddr: p.healthAddr,
		ClockAt: p.clock.Now()}
}

// claimID takes Config.ID and returns the claim's instance token. While a
// row holds it, claimID watches that row: heard from (its heartbeat moves,
// or another process took it) it returns an *IDInUseError; silent for
// Config.IDLease since its last heartbeat (a process that crashed, a
// restart after kill -9) the claim takes it over. Database errors that say
// it is out of reach are retried with backoff; others, and ctx ending, are
// returned.
func (p *process) claimID(ctx context.Context, st *store.Store) (time.Time, error) {
	lease := p.cfg.idLease()
	poll := max(lease/30, 20*time.Millisecond)
	pr := p.presenceBase()
	var seen *store.Worker
	var bo backoff.Backoff
	for {
		pr.ClockAt = p.clock.Now() // this attempt's reading, not the first's
		c, err := st.ClaimWorkerID(ctx, pr, lease)
		switch {
		case err != nil && (ctx.Err() != nil || !store.IsUnreachable(err)):
			return time.Time{}, err
		case err != nil:
			d := bo.Fail()
			p.log.Error("daemon: database not available; retrying", "error", err, "retry_in", d.String())
			if backoff.Sleep(ctx, d) != nil {
				return time.Time{}, ctx.Err()
			}
			continue
		case c.Holder == nil:
			if seen != nil {
				p.log.Warn("daemon: id taken over from a process not heard from within the lease", "id", p.cfg.ID,
					"old_hostname", seen.Hostname, "old_pid", seen.PID, "id_lease", lease.String())
			}
			return c.Since, nil
		}
		h := c.Holder
		if seen == nil {
			seen = h
			p.log.Warn("daemon: id in use; waiting for its holder's heartbeat (then refused) or for its lease to lapse (then taken over)",
				"id", p.cfg.ID, "holder_hostname", h.Hostname, "holder_pid", h.PID, "holder_role", h.Role,
				"last_seen_seconds_ago", h.SecondsSinceSeen, "id_lease", lease.String())
		} else if !h.StartedAt.Equal(seen.StartedAt) || h.LastSeenAt.After(seen.LastSeenAt) {
			return time.Time{}, &IDInUseError{ID: p.cfg.ID, Holder: *h, Lease: lease}
		}
		left := lease - time.Duration(h.SecondsSinceSeen*float64(time.Second))
		if backoff.Sleep(ctx, max(min(poll, left), time.Millisecond)) != nil {
			return time.Time{}, ctx.Err()
		}
	}
}

// heartbeat records the process's presence every Config.IDLease/3 under
// the claim p.since until ctx ends, for the dashboard's Workers screen.
// When the row is no longer the claim's, it claims the ID again (a row
// deleted by hand, or a taker that lapsed in turn) or, when another live
// process holds it, records the *IDTakenOverError in p.takenOver, stops
// the process as its first signal would and returns. Database errors are
// ignored: the loops report database trouble themselves.
func (p *process) heartbeat(ctx context.Context, st *store.Store) {
	lease := p.cfg.idLease()
	t := time.NewTicker(max(lease/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, min(2*time.Second, max(lease/3, 10*time.Millisecond)))
		pr := p.presenceBase()
		if p.presence != nil {
			p.presence(tctx, &pr)
		}
		ok, err := st.RenewWorkerID(tctx, pr, p.since)
		if err == nil && !ok {
			if c, err := st.ClaimWorkerID(tctx, pr, lease); err == nil && c.Holder == nil {
				p.log.Warn("daemon: presence row no longer this process's (deleted, or its taker lapsed); id claimed again", "id", p.cfg.ID)
				p.since = c.Since
			} else if err == nil {
				cancel()
				p.takenOver = &IDTakenOverError{ID: p.cfg.ID, Holder: *c.Holder}
				p.log.Error("daemon: id taken over by another process; stopping", "id", p.cfg.ID,
					"holder_hostname", c.Holder.Hostname, "holder_pid", c.Holder.PID, "holder_role", c.Holder.Role)
				p.stopRun(p.takenOver)
				return
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// releaseID deletes the claim's row when the process stops (not when its
// ID was taken over), so that the ID is free at once for its next start.
// Errors are ignored: the row then lapses after Config.IDLease.
func (p *process) releaseID(st *store.Store) {
	if p.takenOver != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = st.ReleaseWorkerID(ctx, p.cfg.ID, p.since)
}
