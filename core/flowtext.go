package core

import (
	"fmt"
	"strings"
	"time"
)

// How ffctl (`run show`, `task show`, `limits list`) and the dashboard
// say what a task waiting for flow control's admission waits for, in one
// set of words. Keys come from the database: each is made terminal-safe
// (TerminalText) and cut to ShownFlowKeyRunes here (JSON output has it
// whole).

// ShownFlowKeyRunes bounds, in runes, a flow-control key as a line shows
// it (a key is at most MaxFlowKeyLength bytes).
const ShownFlowKeyRunes = 60

// ConcurrencyWaitText is a READY task waiting for a slot of concurrency
// key, which inUse task runs hold of limit: "waiting: concurrency
// customer-42 (5/5)". inUse may exceed limit after an operator lowered it.
func ConcurrencyWaitText(key string, inUse, limit int) string {
	return fmt.Sprintf("waiting: concurrency %s (%d/%d)", FlowKeyText(key), inUse, limit)
}

// RunConcurrencyWaitText is a run waiting for a slot of its run-level
// concurrency key, which inUse open runs hold of limit: "waiting: run
// concurrency acme (2/2)".
func RunConcurrencyWaitText(key string, inUse, limit int) string {
	return fmt.Sprintf("waiting: run concurrency %s (%d/%d)", FlowKeyText(key), inUse, limit)
}

// RateWaitText is a READY task waiting for room within rate limit key,
// limit starts per period per: "waiting: rate limit stripe-api 100/1m0s".
func RateWaitText(key string, limit int, per time.Duration) string {
	return fmt.Sprintf("waiting: rate limit %s %d/%s", FlowKeyText(key), limit, per)
}

// FlowKeyText is a flow-control key as a line shows it: terminal-safe,
// cut to ShownFlowKeyRunes. A tab is shown as \t, not as TerminalText's
// space: a key is an identifier, and "a<tab>b" shown as "a b" named
// another key to an operator who typed what they saw.
func FlowKeyText(key string) string {
	return cut(TerminalText(strings.ReplaceAll(key, "\t", `\t`)), ShownFlowKeyRunes)
}
