package core

import (
	"strings"
	"testing"
	"time"
)

// TestFlowWaitTexts: the words of a task waiting for its admission, with
// a key made terminal-safe and cut.
func TestFlowWaitTexts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ got, want string }{
		{ConcurrencyWaitText("customer-42", 5, 5), "waiting: concurrency customer-42 (5/5)"},
		{ConcurrencyWaitText("k", 3, 1), "waiting: concurrency k (3/1)"},
		{RateWaitText("stripe-api", 100, time.Minute), "waiting: rate limit stripe-api 100/1m0s"},
		{RateWaitText("a\x1b[31mb", 1, time.Second), "waiting: rate limit " + TerminalText("a\x1b[31mb") + " 1/1s"},
		{ConcurrencyWaitText("a\tb", 1, 1), `waiting: concurrency a\tb (1/1)`},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	long := FlowKeyText(strings.Repeat("k", 200))
	if n := len([]rune(long)); n != ShownFlowKeyRunes || !strings.HasSuffix(long, "…") {
		t.Errorf("a long key is shown as %d runes (%q), want %d ending in …", n, long, ShownFlowKeyRunes)
	}
}
