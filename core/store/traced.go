package store

import (
	"encoding/json"
	"fmt"
)

// TracedPromotion is a task a scheduler pass made READY (with its outbox
// row) whose run is traced (workflow_runs.traceparent, migration 00020):
// its dispatch message, which carries the run's traceparent
// (core.Dispatch.Traceparent), and the attempt it was made READY for (1
// for a first attempt, 2 for the first retry). The scheduler records a
// span of each.
type TracedPromotion struct {
	Dispatch json.RawMessage `json:"dispatch"`
	Attempt  int             `json:"attempt"`
}

// readTraced decodes qPromote's traced column, a JSON array of
// TracedPromotion: nil for an empty one (no traced run, the usual case:
// nothing is allocated).
func readTraced(raw JSON) ([]TracedPromotion, error) {
	if len(raw) <= len("[]") {
		return nil, nil
	}
	var traced []TracedPromotion
	if err := json.Unmarshal(raw, &traced); err != nil {
		return nil, fmt.Errorf("read the traced promotions: %w", err)
	}
	return traced, nil
}
