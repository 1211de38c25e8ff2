package core

import (
	"errors"
	"fmt"
)

// PauseMode says what a trigger of a paused workflow does.
type PauseMode string

const (
	// PauseQueue (the default): a trigger creates its run as usual; its
	// tasks wait, undispatched, until the workflow is resumed.
	PauseQueue PauseMode = "queue"
	// PauseDrop: a trigger creates nothing and fails with
	// store.ErrWorkflowPaused; the pause counts the runs it dropped.
	PauseDrop PauseMode = "drop"
)

// ErrBadPauseMode is wrapped by ParsePauseMode's refusal.
var ErrBadPauseMode = errors.New("pause mode must be queue or drop")

// ParsePauseMode returns the mode named s ("" is PauseQueue). Other values
// are an error wrapping ErrBadPauseMode that quotes s.
func ParsePauseMode(s string) (PauseMode, error) {
	switch PauseMode(s) {
	case "", PauseQueue:
		return PauseQueue, nil
	case PauseDrop:
		return PauseDrop, nil
	}
	return "", fmt.Errorf("%w, not %q", ErrBadPauseMode, s)
}
