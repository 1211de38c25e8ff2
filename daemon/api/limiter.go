package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// failureLimiter paces each source's failed authentications: a token
// bucket per source (a remote IP address) holding burst failures and
// earning one back every `every`. A failure takes one; a source whose
// bucket is empty is refused before its credentials are checked, so a
// guesser gets at most burst tries and then one per `every`, and a
// correct guess is not told apart while it is refused. At most max
// sources are remembered: past that, the sources whose buckets are full
// again are forgotten first, then any.
type failureLimiter struct {
	every time.Duration
	burst int
	max   int

	mu      sync.Mutex
	sources map[string]*rate.Limiter
}

func newFailureLimiter(every time.Duration, burst, max int) *failureLimiter {
	return &failureLimiter{every: every, burst: burst, max: max, sources: map[string]*rate.Limiter{}}
}

// allowed reports whether source may try to authenticate at now; when not,
// retryAfter is how long until it may.
func (l *failureLimiter) allowed(source string, now time.Time) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, seen := l.sources[source]
	if !seen || lim.TokensAt(now) >= 1 {
		return true, 0
	}
	r := lim.ReserveN(now, 1)
	defer r.CancelAt(now)
	return false, r.DelayFrom(now)
}

// failed records a failed authentication of source at now.
func (l *failureLimiter) failed(source string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, seen := l.sources[source]
	if !seen {
		l.makeRoom(now)
		lim = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.sources[source] = lim
	}
	lim.AllowN(now, 1)
}

// makeRoom forgets sources once max are remembered: those whose buckets
// are full again, and when none is, one of the others.
func (l *failureLimiter) makeRoom(now time.Time) {
	if len(l.sources) < l.max {
		return
	}
	for s, lim := range l.sources {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.sources, s)
		}
	}
	for s := range l.sources {
		if len(l.sources) < l.max {
			return
		}
		delete(l.sources, s)
	}
}
