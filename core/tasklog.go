package core

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// LogStream names where a line of a task's log came from: a handler's
// slog logger (LogStreamLog), or a shell command's standard output or
// error (LogStreamStdout, LogStreamStderr).
type LogStream string

// The streams of a task's log.
const (
	LogStreamLog    LogStream = "log"
	LogStreamStdout LogStream = "stdout"
	LogStreamStderr LogStream = "stderr"
)

// LogStreams returns every LogStream, in the order the storage's check
// lists them.
func LogStreams() []LogStream { return []LogStream{LogStreamLog, LogStreamStdout, LogStreamStderr} }

// MaxTaskLogLineBytes bounds one line of a task's log (SanitizeLogLine):
// a longer line is cut with a note of the bytes cut, the note included.
const MaxTaskLogLineBytes = 8 << 10

// SanitizeLogLine is SanitizeText for a line of a task's log: valid UTF-8,
// no NUL, and at most MaxTaskLogLineBytes in all, the marker of a cut line
// ("… [11808 bytes truncated]", counting the bytes of the line as
// written) included. A line it returned comes back unchanged, so the
// worker and the store may both apply it (SanitizeText's bound leaves the
// marker outside it: the store's second pass cut the worker's marker and
// counted only the marker's bytes).
func SanitizeLogLine(s string) string {
	s = SanitizeText(s, 0)
	if len(s) <= MaxTaskLogLineBytes {
		return s
	}
	// The marker's length depends on the count's digits: reserve room for
	// the widest count a line can have (len(s) has the most digits).
	room := len(fmt.Sprintf(truncationMarker, len(s)))
	cut := MaxTaskLogLineBytes - room
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(truncationMarker, len(s)-cut)
}

// TaskLog receives the lines of one attempt's log. The worker puts one in
// each handler's context (WithTaskLog); it keys every line by the
// attempt, sanitises it (SanitizeText: valid UTF-8, no NUL, at most
// MaxTaskLogLineBytes) and bounds the attempt's total. Line never blocks
// on the database and never fails: a line over the attempt's cap is
// counted and dropped. Safe for concurrent use.
type TaskLog interface {
	// Line adds text (one line, without its newline) from stream; level
	// is the slog level's name ("INFO") for LogStreamLog, "" otherwise.
	Line(stream LogStream, level, text string)
}

type taskLogKey struct{}

// WithTaskLog returns ctx carrying l, the log of the attempt a handler
// runs in ctx (the worker's business; a test may pass its own).
func WithTaskLog(ctx context.Context, l TaskLog) context.Context {
	return context.WithValue(ctx, taskLogKey{}, l)
}

// TaskLogOf returns the task log ctx carries, or nil outside a worker's
// attempt (or with the worker's task logs off).
func TaskLogOf(ctx context.Context) TaskLog {
	l, _ := ctx.Value(taskLogKey{}).(TaskLog)
	return l
}

// Logger returns a logger whose records go into the task log of ctx, one
// line each: the message, then the attributes as key=value (values with
// spaces or quotes quoted), stream "log", level the record's level (every
// level, Debug included). Outside a worker's attempt (no TaskLog in ctx,
// a handler called by a test, or task logs off) it returns a logger that
// discards everything: a handler's task log never leaks into the
// daemon's own log.
func Logger(ctx context.Context) *slog.Logger {
	l := TaskLogOf(ctx)
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&taskLogHandler{log: l})
}

// taskLogHandler is the slog.Handler of Logger: one record, one line.
type taskLogHandler struct {
	log    TaskLog
	prefix string // the groups opened, "a.b."
	attrs  string // the attributes added by WithAttrs, formatted
}

func (h *taskLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *taskLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	h.log.Line(LogStreamLog, r.Level.String(), b.String())
	return nil
}

func (h *taskLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	return &taskLogHandler{log: h.log, prefix: h.prefix, attrs: b.String()}
}

func (h *taskLogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &taskLogHandler{log: h.log, prefix: h.prefix + name + ".", attrs: h.attrs}
}

// appendAttr writes " key=value" for a (a group's members with the
// group's name as a prefix), skipping empty attributes as slog does.
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, m := range a.Value.Group() {
			appendAttr(b, p, m)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\r\n\"=") {
		v = strconv.Quote(v)
	}
	b.WriteString(" " + prefix + a.Key + "=" + v)
}
