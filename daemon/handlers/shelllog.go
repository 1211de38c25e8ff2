package handlers

import (
	"bytes"
	"context"
	"io"

	"github.com/flowforge/flowforge/core"
)

// logLines is an io.Writer that cuts a command's output into lines and
// adds each to the attempt's task log (core.TaskLogOf) on its stream: a
// line at each newline (a trailing "\r" dropped), a part line once it
// reaches core.MaxTaskLogLineBytes, and what is left at flush. Without a
// task log (task logs off, or the handler called outside a worker) it
// keeps nothing. One writer per stream: exec copies each pipe in a
// goroutine of its own.
type logLines struct {
	log    core.TaskLog
	stream core.LogStream
	part   []byte
}

// newLogLines returns the writer of stream's lines for the task log of
// ctx, nil when ctx has none.
func newLogLines(ctx context.Context, stream core.LogStream) *logLines {
	l := core.TaskLogOf(ctx)
	if l == nil {
		return nil
	}
	return &logLines{log: l, stream: stream}
}

func (w *logLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.part = append(w.part, p...)
			for len(w.part) >= core.MaxTaskLogLineBytes {
				w.emit(w.part[:core.MaxTaskLogLineBytes])
				w.part = append(w.part[:0], w.part[core.MaxTaskLogLineBytes:]...)
			}
			return n, nil
		}
		w.emit(append(w.part, p[:i]...))
		w.part = w.part[:0]
		p = p[i+1:]
	}
	return n, nil
}

// flush adds the last line when the output did not end with a newline.
func (w *logLines) flush() {
	if w != nil && len(w.part) > 0 {
		w.emit(w.part)
		w.part = nil
	}
}

func (w *logLines) emit(line []byte) {
	w.log.Line(w.stream, "", string(bytes.TrimSuffix(line, []byte("\r"))))
}

// teeLines returns t, or a writer to t and to lines when lines is not nil.
func teeLines(t io.Writer, lines *logLines) io.Writer {
	if lines == nil {
		return t
	}
	return io.MultiWriter(t, lines)
}
