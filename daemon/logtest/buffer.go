// Package logtest holds what tests of FlowForge's goroutines share to read
// what those goroutines write: Buffer, a log or output sink safe for
// concurrent writers and readers.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex: goroutines (a logger, a
// child process's output copier) write to it while the test reads it. The
// zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is the number of bytes written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
