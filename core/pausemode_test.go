package core_test

import (
	"errors"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestParsePauseMode: "" and queue are PauseQueue, drop is PauseDrop;
// anything else (case matters: callers fold it) is refused with an error
// wrapping core.ErrBadPauseMode that quotes the text.
func TestParsePauseMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		mode core.PauseMode
		err  string // "": accepted
	}{
		{"", core.PauseQueue, ""},
		{"queue", core.PauseQueue, ""},
		{"drop", core.PauseDrop, ""},
		{"later", "", `pause mode must be queue or drop, not "later"`},
		{"DROP", "", `pause mode must be queue or drop, not "DROP"`},
		{" queue", "", `pause mode must be queue or drop, not " queue"`},
	} {
		mode, err := core.ParsePauseMode(tc.in)
		if tc.err == "" {
			if err != nil || mode != tc.mode {
				t.Errorf("ParsePauseMode(%q) = %q, %v; want %q", tc.in, mode, err, tc.mode)
			}
			continue
		}
		if !errors.Is(err, core.ErrBadPauseMode) || err.Error() != tc.err || mode != "" {
			t.Errorf("ParsePauseMode(%q) = %q, %v; want %q wrapping core.ErrBadPauseMode", tc.in, mode, err, tc.err)
		}
	}
}
