package broker

import (
	"io"
	"net"
	"sync"
)

// corkFlushBytes is the most bytes a corked connection holds before it
// writes them out anyway: a batch of a thousand messages still reaches
// the broker in pieces, which it reads while the rest are encoded, and the
// memory held stays small.
const corkFlushBytes = 64 << 10

// corkConn is the socket under an AMQP connection, able to hold its
// writes back while a batch is published (Publisher.publishAll). amqp091
// flushes every message it publishes to the socket on its own, one write
// system call a message; corked, the messages of a batch go out together,
// at most corkFlushBytes at a time (issue 28's overhead: a fifth of a
// publisher's CPU under W2 with the transition stream went to those
// writes). Uncorked, a write goes straight to the socket.
//
// Everything amqp091 writes goes through Write, in its order, whichever
// goroutine writes (a heartbeat while a batch is corked waits in the
// buffer with the batch), so the stream of bytes is the same; only the
// moment the bytes leave changes. Deadlines and Close go straight to the
// socket: a flush the broker does not read is interrupted by them as a
// write is (the publisher's watchdog, Publisher.abort).
type corkConn struct {
	net.Conn

	mu     sync.Mutex // guards the fields below, and orders the writes
	w      io.Writer  // where writes go: Conn (tests interpose)
	corked bool
	buf    []byte
}

// newCorkConn wraps the socket c, uncorked.
func newCorkConn(c net.Conn) *corkConn { return &corkConn{Conn: c, w: c} }

// Write writes p to the socket, or while corked appends it to the buffer
// (writing the buffer out once it holds corkFlushBytes). Errors: the
// socket's.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.w.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= corkFlushBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// cork holds the writes that follow until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes out what the connection holds and lets the writes that
// follow go straight to the socket. Errors: the socket's (the bytes held
// are lost with the connection, which the caller must close).
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

// flushLocked writes the buffer to the socket and empties it; c.mu held.
func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}
