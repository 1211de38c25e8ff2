package store

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Session bounds of the daemons' connections (Options.StatementTimeout,
// LockTimeout, IdleInTxTimeout). Each is sent to PostgreSQL as a run-time
// parameter of every session the pool (and a LISTEN connection) opens, so a
// session can never wait, run or sit in a transaction without bound.
const (
	// StatementTimeoutDefault bounds one statement. Every daemon statement
	// is LIMITed and served by an index and takes milliseconds; the slowest
	// legitimate ones (a sweep or a publisher batch on a large backlog, or
	// the same under a held-back xmin horizon) take seconds. 30s is an
	// order of magnitude above those, and every daemon loop retries a
	// statement that failed.
	StatementTimeoutDefault = 30 * time.Second
	// LockTimeoutDefault bounds the wait for one lock. The longest a
	// daemon holds a row lock another daemon statement may wait for is a
	// publisher batch (outbox rows locked while confirms are awaited, at
	// most the broker's confirm timeout, 10s by default): 15s stays above
	// it, so a healthy publisher never makes it fire, while a statement
	// stuck behind a forgotten BEGIN or a queued migration gives up.
	LockTimeoutDefault = 15 * time.Second
	// IdleInTxTimeoutDefault ends a session that sits idle inside a
	// transaction this long (releasing its locks and its snapshot). The
	// longest a daemon leaves its transaction idle is the publisher
	// waiting for confirms with its batch open (the confirm timeout, 10s by
	// default); 60s leaves a wide margin. See ValidateSession.
	IdleInTxTimeoutDefault = 60 * time.Second
	// IdleInTxMargin is how much IdleInTxTimeout must exceed the longest
	// time a daemon holds a transaction idle (ValidateSession): room for
	// the round trips around the wait.
	IdleInTxMargin = 5 * time.Second
)

// ErrBadSessionBounds is wrapped by ValidateSession for a combination of
// session bounds that would break a daemon or have no effect.
var ErrBadSessionBounds = errors.New("bad database session timeouts")

// ValidateSession checks the session bounds of o. Zero disables a bound (the
// server's default applies); negative values are refused. When both are
// set, LockTimeout must not exceed StatementTimeout (it would never fire).
// idleHeld is the longest time the caller holds a transaction open while
// idle (the publisher: its broker confirm timeout; 0 when none): a set
// IdleInTxTimeout must exceed it by at least IdleInTxMargin (so is never
// below IdleInTxMargin), or PostgreSQL would end healthy sessions. The error wraps ErrBadSessionBounds.
func (o Options) ValidateSession(idleHeld time.Duration) error {
	for _, b := range []struct {
		name string
		d    time.Duration
	}{{"statement timeout", o.StatementTimeout}, {"lock timeout", o.LockTimeout}, {"idle-in-transaction timeout", o.IdleInTxTimeout}} {
		if b.d < 0 {
			return fmt.Errorf("%w: the %s is negative (%s); use 0 to disable it", ErrBadSessionBounds, b.name, b.d)
		}
		if b.d > 0 && b.d < time.Millisecond {
			return fmt.Errorf("%w: the %s (%s) is below PostgreSQL's resolution of 1ms", ErrBadSessionBounds, b.name, b.d)
		}
	}
	if o.StatementTimeout > 0 && o.LockTimeout > o.StatementTimeout {
		return fmt.Errorf("%w: the lock timeout (%s) exceeds the statement timeout (%s), so it would never fire", ErrBadSessionBounds, o.LockTimeout, o.StatementTimeout)
	}
	if o.IdleInTxTimeout > 0 && o.IdleInTxTimeout < idleHeld+IdleInTxMargin {
		return fmt.Errorf("%w: the idle-in-transaction timeout (%s) must be at least %s (the %s a transaction may stay idle, the publisher's confirm timeout, plus %s for round trips): PostgreSQL would end healthy sessions",
			ErrBadSessionBounds, o.IdleInTxTimeout, idleHeld+IdleInTxMargin, idleHeld, IdleInTxMargin)
	}
	return nil
}

// runtimeParams returns the PostgreSQL run-time parameters of o's session
// bounds, in milliseconds (unset bounds are left out), and jit off: every
// statement FlowForge sends reads a bounded number of rows through an
// index, where compiling its expressions costs far more than it saves
// (the publisher's outbox gauges, planned over a backlog of 20,000 rows,
// spent about a second in JIT every five seconds; the pruner's batches 630
// of 710 ms).
func (o Options) runtimeParams() map[string]string {
	p := map[string]string{"jit": "off"}
	set := func(name string, d time.Duration) {
		if d > 0 {
			p[name] = strconv.FormatInt(d.Milliseconds(), 10)
		}
	}
	set("statement_timeout", o.StatementTimeout)
	set("lock_timeout", o.LockTimeout)
	set("idle_in_transaction_session_timeout", o.IdleInTxTimeout)
	return p
}

// SessionURL returns raw (a postgres:// URL or a key=value DSN) with o's
// session bounds added as connection parameters, for connections opened
// from a URL rather than by Open (a LISTEN connection, see Listen); Open
// applies o itself. Bounds already in raw are replaced. The error is a raw
// that does not parse as a URL.
func SessionURL(raw string, o Options) (string, error) {
	params := o.runtimeParams()
	if len(params) == 0 {
		return raw, nil
	}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("database url %s: %w", RedactURL(raw), err)
		}
		q := u.Query()
		for _, k := range names {
			q.Set(k, params[k])
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	var b strings.Builder
	b.WriteString(raw)
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%s", k, params[k])
	}
	return b.String(), nil
}
