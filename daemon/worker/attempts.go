package worker

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// attemptKey names one attempt: its task run and the fencing token its
// claim wrote (the dispatch's token plus one).
type attemptKey struct {
	id    uuid.UUID
	token int64
}

// runningAttempts is the set of attempts this worker runs, from the
// decision to run one until the fate of its outcome is known, so that at
// most one delivery of a (task, token) runs in a worker (mode 82). Two
// copies of one dispatch (a redelivery after a connection loss while the
// old copy waits here, a republish after a lost confirm, a redispatch)
// whose claims got no answer are each read back by store.ClaimedBy, and
// the read-back matches for both: the row is RUNNING for this worker at
// the token either claim would have written. Whichever copy takes the key
// first runs; the other is acked as a duplicate and runs nothing. The same
// holds when one copy's claim was answered and the other's was not.
//
// An attempt whose outcome could not be recorded keeps its key for linger
// (two leases): its row may stay RUNNING at its token until the reaper
// takes it, and a read-back in that time would match it again. Safe for
// concurrent use; the zero value is ready.
type runningAttempts struct {
	mu        sync.Mutex
	running   map[attemptKey]struct{}
	lingering map[attemptKey]time.Time // key -> until when (process clock)
}

// start takes k for the caller at now, or returns false when an attempt
// of k runs here already (or ended unrecorded less than its linger ago).
func (a *runningAttempts) start(k attemptKey, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for lk, until := range a.lingering {
		if !now.Before(until) {
			delete(a.lingering, lk)
		}
	}
	if _, ok := a.running[k]; ok {
		return false
	}
	if _, ok := a.lingering[k]; ok {
		return false
	}
	if a.running == nil {
		a.running = make(map[attemptKey]struct{})
	}
	a.running[k] = struct{}{}
	return true
}

// end releases k, which start returned true for. recorded says whether the
// attempt's outcome reached the database (recorded, or rejected by its
// fencing token); when it did not, k lingers until now+linger.
func (a *runningAttempts) end(k attemptKey, recorded bool, now time.Time, linger time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, k)
	if recorded {
		return
	}
	if a.lingering == nil {
		a.lingering = make(map[attemptKey]time.Time)
	}
	a.lingering[k] = now.Add(linger)
}
