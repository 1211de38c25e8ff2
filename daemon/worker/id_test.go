package worker_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/daemon/worker"
)

func TestCheckIDBoundsTheConsumerTag(t *testing.T) {
	cases := []struct {
		name, id string
		wantErr  string // "" when accepted
	}{
		{"empty (default chosen)", "", ""},
		{"default shape", "worker-host.example-4242-ab12", ""},
		{"255 bytes", strings.Repeat("w", 255), ""},
		{"256 bytes", strings.Repeat("w", 256), "at most 255"},
		{"128 two-byte runes are 256 bytes", strings.Repeat("é", 128), "at most 255"},
		{"newline", "w\nforged log line", "U+000A"},
		{"space", "w 1", "U+0020"},
		{"C1 CSI", "w\u009b31m", "U+009B"},
		{"bidi override", "w\u202eevil", "U+202E"},
		{"invalid UTF-8", "w\xff", "not valid UTF-8"},
		{"zero-width space", "w\u200bx", "U+200B"},
		{"byte-order mark", "\ufeffw", "U+FEFF"},
	}
	for _, c := range cases {
		err := worker.CheckID(c.id)
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: CheckID = %v, want %q", c.name, err, c.wantErr)
		}
	}
}
