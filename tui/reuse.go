package tui

import "github.com/flowforge/flowforge/core/store"

// reusedNote is appended to the task view's error line when the task run
// reused another's result for its idempotency key: " · result reused from
// task run X of run Y"; "" otherwise.
func reusedNote(src *store.KeySource) string {
	if src == nil {
		return ""
	}
	return " · result reused from " + src.String()
}
