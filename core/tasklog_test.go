package core_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

type lines []string

func (l *lines) Line(stream core.LogStream, level, text string) {
	*l = append(*l, string(stream)+" "+level+" "+text)
}

// TestLoggerWritesOneLinePerRecord: a record is its message then its
// attributes (With's first, groups as prefixes, values with spaces or
// quotes quoted, empty attributes left out); outside a worker (no task
// log) Logger discards.
func TestLoggerWritesOneLinePerRecord(t *testing.T) {
	t.Parallel()
	core.Logger(context.Background()).Info("nowhere") // must not panic
	var got lines
	log := core.Logger(core.WithTaskLog(context.Background(), &got)).With("id", 7)
	log.Info("hello", "who", "a b", slog.Group("g", "k", `q"`), slog.Attr{})
	log.WithGroup("req").Debug("x", "n", 1, "empty", "")
	log.Warn("plain")
	want := []string{`log INFO hello id=7 who="a b" g.k="q\""`, `log DEBUG x id=7 req.n=1 req.empty=""`, "log WARN plain id=7"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
