// Package clock is the daemons' only access to the process's wall clock.
//
// FlowForge compares no process timestamps: leases, retry due times and
// ages are computed by PostgreSQL's now() inside the SQL. The daemons read
// the wall clock only to measure their own intervals (how long a finish has
// been retried, how long ago the last scheduler pass ran). Those readings go
// through a Clock so that a test can run a daemon whose clock is hours off
// (ffctl's hidden --debug-clock-skew flag) and show that nothing that
// matters moves.
package clock

import (
	"fmt"
	"strings"
	"time"
)

// Clock reads the wall clock.
type Clock interface {
	Now() time.Time
}

// System is the process's own clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Skewed is a clock that is Skew ahead of the process clock (behind when
// negative). Its readings carry no monotonic component, so every duration
// computed from them is wall-clock arithmetic, as on a machine whose clock
// really is off.
type Skewed struct {
	Skew time.Duration
}

// Now returns the process time shifted by Skew.
func (s Skewed) Now() time.Time { return time.Now().Round(0).Add(s.Skew) }

// Since returns the time elapsed since t according to c.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// OrSystem returns c, or System when c is nil.
func OrSystem(c Clock) Clock {
	if c == nil {
		return System{}
	}
	return c
}

// ParseSkew parses a skew such as "+3h", "-90m" or "0". The empty string
// means no skew.
func ParseSkew(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return 0, fmt.Errorf("clock skew %q: %w", s, err)
	}
	return d, nil
}
