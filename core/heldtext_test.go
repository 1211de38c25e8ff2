package core

import (
	"strings"
	"testing"
	"time"
)

// TestHeldTexts: the words run show, task show and the dashboard use for
// what a held task holds, including a due time past, a key with a space
// or none, a long key and id cut, and hostile stored text made safe.
func TestHeldTexts(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 12, 5, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	left := 23*time.Hour + 59*time.Minute + 59*time.Second
	week := 7*24*time.Hour - time.Second
	for _, c := range []struct{ got, want string }{
		{SleepingText(due, left), "sleeping until 2026-12-05 10:00:00Z (in 23h59m)"},
		{SleepingText(due, -3*time.Second), "sleeping until 2026-12-05 10:00:00Z (due 3s ago)"},
		{WaitingText("order.approved", "ORDER-17", week, "fail"), "waiting for event order.approved key ORDER-17 (times out in 6d23h, on timeout: fail)"},
		{WaitingText("order.approved", "", -time.Minute, "skip"), "waiting for event order.approved without a key (timed out 1m00s ago, on timeout: skip)"},
		{WaitingText("e", `two "words"`, time.Second, "fail"), `waiting for event e key "two \"words\"" (times out in 1s, on timeout: fail)`},
		{WaitingText("e", strings.Repeat("k", 100), time.Second, "fail"), "waiting for event e key " + strings.Repeat("k", ShownKeyRunes-1) + "… (times out in 1s, on timeout: fail)"},
		{WaitingText("e", "\x1b[2J", time.Second, "fail"), `waiting for event e key \x1b[2J (times out in 1s, on timeout: fail)`},
		{TimedOutText("order.approved", "ORDER-17"), "no event order.approved key ORDER-17 came in time (on timeout: skip)"},
		{CompletedByText("ev-17"), "completed by event ev-17"},
		{CompletedByText(strings.Repeat("x", 100) + "\u202e"), "completed by event " + strings.Repeat("x", ShownEventIDRunes-1) + "…"},
		{ChildRunText("0b7c6d2e", "shipping", RunRunning, false), "child run 0b7c6d2e (shipping, RUNNING)"},
		{ChildRunText("0b7c6d2e", "", "", false), "child run 0b7c6d2e"},
		{ChildRunText("0b7c6d2e", "shipping", RunRunning, true), "child run 0b7c6d2e (deleted)"},
		{CompactDuration(850 * time.Millisecond), "850ms"},
		{CompactDuration(-(2*time.Hour + 5*time.Minute)), "-2h05m"},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
}
