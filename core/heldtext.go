package core

import (
	"fmt"
	"strings"
	"time"
)

// How ffctl (`run show`, `task show`) and the dashboard say what a held
// task (a sleep, a wait, a child run) holds, in one set of words. Every
// string argument may come from the database: each is made terminal-safe
// (TerminalText) and cut to a readable length here.

// DueTimeLayout writes a held task's due time: UTC, to the second, with a
// "Z" (2026-12-05 10:00:00Z), so that it reads the same on every machine.
const DueTimeLayout = "2006-01-02 15:04:05Z"

// Bounds, in runes, of the stored text a held task's line shows (JSON
// output has it whole): an event's key and id.
const (
	ShownKeyRunes     = 40
	ShownEventIDRunes = 60
)

// SleepingText is a RUNNING sleep due at due, left from now (database
// clock): "sleeping until 2026-12-05 10:00:00Z (in 23h59m)"; once due, and
// not yet woken by a scheduler pass, "(due 3s ago)".
func SleepingText(due time.Time, left time.Duration) string {
	when := "in " + CompactDuration(left)
	if left < 0 {
		when = "due " + CompactDuration(-left) + " ago"
	}
	return fmt.Sprintf("sleeping until %s (%s)", due.UTC().Format(DueTimeLayout), when)
}

// WaitingText is a RUNNING wait for event with key, timing out left from
// now (database clock): "waiting for event order.approved key ORDER-17
// (times out in 6d23h, on timeout: fail)"; once its timeout passed, and
// not yet acted on, "(timed out 3s ago, on timeout: fail)".
func WaitingText(event, key string, left time.Duration, onTimeout string) string {
	when := "times out in " + CompactDuration(left)
	if left < 0 {
		when = "timed out " + CompactDuration(-left) + " ago"
	}
	return fmt.Sprintf("waiting for event %s %s (%s, on timeout: %s)", TerminalText(event), KeyText(key), when, TerminalText(onTimeout))
}

// TimedOutText is a wait SKIPPED by its timeout (on_timeout: skip): "no
// event order.approved key ORDER-17 came in time (on timeout: skip)".
func TimedOutText(event, key string) string {
	return fmt.Sprintf("no event %s %s came in time (on timeout: skip)", TerminalText(event), KeyText(key))
}

// CompletedByText is a wait an event completed: "completed by event
// ev-17", the id cut to ShownEventIDRunes.
func CompletedByText(eventID string) string {
	return "completed by event " + cut(TerminalText(eventID), ShownEventIDRunes)
}

// ChildRunText is a `workflow:` task's child run: "child run ID (shipping,
// RUNNING)"; "child run ID" when its workflow is not known, and "child run
// ID (deleted)" when the run is gone (deleted or pruned).
func ChildRunText(id, workflow string, state RunState, gone bool) string {
	switch {
	case gone:
		return "child run " + id + " (deleted)"
	case workflow == "":
		return "child run " + id
	}
	return fmt.Sprintf("child run %s (%s, %s)", id, TerminalText(workflow), TerminalText(string(state)))
}

// KeyText is an event key as a held task's line shows it: "key ORDER-17",
// `key "two words"` (quoted when it holds a space or a quote), "without a
// key" for "", cut to ShownKeyRunes.
func KeyText(key string) string {
	if key == "" {
		return "without a key"
	}
	k := cut(TerminalText(key), ShownKeyRunes)
	if strings.ContainsAny(k, ` "`) {
		k = `"` + strings.ReplaceAll(k, `"`, `\"`) + `"`
	}
	return "key " + k
}

// CompactDuration writes d compactly, truncated to its two largest units:
// 850ms, 45s, 3m12s, 2h05m, 6d23h; negative with a "-".
func CompactDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "-" + s
	}
	return s
}

// cut shortens s to at most n runes, the last one "…" when it cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// SecondsLeft is a number of seconds (a read's due_seconds_left: a held
// task's due time less the database's now) as a duration, 0 for nil.
func SecondsLeft(sec *float64) time.Duration {
	if sec == nil {
		return 0
	}
	return time.Duration(*sec * float64(time.Second))
}
