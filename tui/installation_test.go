package tui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// headerInstallation is the installation the header tests show.
var headerInstallation = Installation{
	ID:              uuid.MustParse("6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a003"),
	Database:        "127.0.0.1:5432/flowforge",
	DefaultDatabase: true,
	Vhost:           "/",
	Queue:           "flowforge.dispatch",
}

// TestTheHeaderNamesTheInstallation: the second header line names the
// installation (its id's first 8 hex digits), the database (and that it is
// the default), the vhost and the queue; it is clipped to the width and
// the body gives up one line for it. Golden at two sizes.
func TestTheHeaderNamesTheInstallation(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct {
		w, h int
		want string
	}{
		{80, 24, "installation 6f1c3e0e · db 127.0.0.1:5432/flowforge (default) · queue flowforge."},
		{140, 30, "installation 6f1c3e0e · db 127.0.0.1:5432/flowforge (default: FLOWFORGE_DATABASE_URL is unset) · queue flowforge.dispatch (vhost /)"},
	} {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			h := newHarness(t, newFake(), Options{Installation: headerInstallation})
			h.size(sz.w, sz.h)
			lines := strings.Split(h.view(), "\n")
			if want := sz.want; lines[1] != want {
				t.Fatalf("header line 2 = %q, want %q", lines[1], want)
			}
			if !strings.HasPrefix(lines[0], "FlowForge") || !strings.HasPrefix(lines[2], "runs") {
				t.Fatalf("the tabs, the installation, then the screen; got:\n%s", strings.Join(lines[:3], "\n"))
			}
			h.golden()
		})
	}
}

// TestTheHeaderShowsAnInstallationThatCouldNotBeRead: a nil id is shown as
// unknown, not as zeros; no installation at all, no line.
func TestTheHeaderShowsAnInstallationThatCouldNotBeRead(t *testing.T) {
	t.Parallel()
	in := headerInstallation
	in.ID, in.DefaultDatabase = uuid.Nil, false
	h := newHarness(t, newFake(), Options{Installation: in})
	h.size(140, 30)
	if line := strings.Split(h.view(), "\n")[1]; line != "installation unknown · db 127.0.0.1:5432/flowforge · queue flowforge.dispatch (vhost /)" {
		t.Fatalf("header line 2 = %q", line)
	}
	none := newHarness(t, newFake(), Options{})
	if line := strings.Split(none.view(), "\n")[1]; strings.Contains(line, "installation") {
		t.Fatalf("an installation line without an installation: %q", line)
	}
}
