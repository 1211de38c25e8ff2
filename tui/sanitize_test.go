package tui

import "testing"

func TestFirstLine(t *testing.T) {
	t.Parallel()
	s := "boom: \x1b[2Jcleared\r\nsecond line"
	if got, want := firstLine(&s), `boom: \x1b[2Jcleared`; got != want {
		t.Errorf("firstLine = %q, want %q", got, want)
	}
	if got := firstLine(nil); got != "-" {
		t.Errorf("firstLine(nil) = %q", got)
	}
}
