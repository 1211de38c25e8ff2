package tui

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// fmtAge renders a duration compactly: 850ms, 45s, 3m12s, 2h05m, 3d04h
// (core.CompactDuration, the words ffctl uses too).
func fmtAge(d time.Duration) string { return core.CompactDuration(d) }

// since is the age of t at now (both on the database clock); "-" for nil.
func since(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return fmtAge(now.Sub(*t))
}

// fmtSeconds renders a number of seconds like fmtAge.
func fmtSeconds(sec float64) string {
	return fmtAge(time.Duration(sec * float64(time.Second)))
}

// fmtLease renders the lease time left: "12s", or "-4s" once expired.
func fmtLease(sec *float64) string {
	if sec == nil {
		return "-"
	}
	if *sec < 0 {
		return "-" + fmtSeconds(math.Abs(*sec))
	}
	return fmtSeconds(*sec)
}

// fmtCount renders a bounded count: at the cap it reads "10000+".
func fmtCount(n, limit int64) string {
	if limit > 0 && n >= limit {
		return fmt.Sprintf("%d+", limit)
	}
	return fmt.Sprint(n)
}

// shortID is the first block of a uuid, enough to tell rows apart.
func shortID(id uuid.UUID) string {
	return id.String()[:8]
}

// fmtRate renders events per second.
func fmtRate(perSecond float64) string {
	switch {
	case perSecond == 0:
		return "0/s"
	case perSecond < 1:
		return fmt.Sprintf("%.2f/s", perSecond)
	case perSecond < 100:
		return fmt.Sprintf("%.1f/s", perSecond)
	default:
		return fmt.Sprintf("%.0f/s", perSecond)
	}
}

// plural returns "1 task" / "2 tasks".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// joinNonEmpty joins the non-empty parts with sep.
func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
