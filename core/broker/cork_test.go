package broker

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordingConn records each Write (and can fail them), interposed
// between a corkConn and its socket.
type recordingConn struct {
	next io.Writer // the socket; nil in the unit tests

	mu     sync.Mutex
	writes [][]byte
	fail   atomic.Bool // Write returns errSocket
}

var errSocket = errors.New("socket broken")

func (c *recordingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errSocket
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	if c.next != nil {
		return c.next.Write(p)
	}
	return len(p), nil
}

// interpose puts a recordingConn between p's cork and its socket.
func interpose(p *Publisher) *recordingConn {
	rec := &recordingConn{}
	p.sock.mu.Lock()
	rec.next, p.sock.w = p.sock.w, rec
	p.sock.mu.Unlock()
	return rec
}

func (c *recordingConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes)
}

func TestCorkConnHoldsWritesUntilUncorked(t *testing.T) {
	big := bytes.Repeat([]byte("x"), corkFlushBytes)
	tests := []struct {
		name   string
		writes [][]byte
		// wantHeld is how many writes reach the socket while corked,
		// wantAfter how many after uncork.
		wantHeld, wantAfter int
	}{
		{name: "small writes wait for the uncork", writes: [][]byte{[]byte("a"), []byte("bc"), []byte("def")}, wantHeld: 0, wantAfter: 1},
		{name: "a full buffer goes out at once", writes: [][]byte{[]byte("a"), big, []byte("z")}, wantHeld: 1, wantAfter: 2},
		{name: "nothing written, nothing flushed", writes: nil, wantHeld: 0, wantAfter: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingConn{}
			c := &corkConn{w: rec}
			c.cork()
			var want []byte
			for _, w := range tt.writes {
				n, err := c.Write(w)
				if err != nil || n != len(w) {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
				want = append(want, w...)
			}
			if got := rec.count(); got != tt.wantHeld {
				t.Fatalf("corked: %d writes reached the socket, want %d", got, tt.wantHeld)
			}
			if err := c.uncork(); err != nil {
				t.Fatalf("uncork: %v", err)
			}
			if got := rec.count(); got != tt.wantAfter {
				t.Fatalf("uncorked: %d writes reached the socket, want %d", got, tt.wantAfter)
			}
			if got := bytes.Join(rec.writes, nil); !bytes.Equal(got, want) {
				t.Fatalf("the socket got %d bytes, not the %d written in order", len(got), len(want))
			}
			if _, err := c.Write([]byte("after")); err != nil || rec.count() != tt.wantAfter+1 {
				t.Fatalf("a write after uncork did not go straight to the socket (err %v, %d writes)", err, rec.count())
			}
		})
	}
}

func TestCorkConnReportsAFailedFlush(t *testing.T) {
	rec := &recordingConn{}
	c := &corkConn{w: rec}
	c.cork()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatalf("corked Write: %v", err)
	}
	rec.fail.Store(true)
	if err := c.uncork(); !errors.Is(err, errSocket) {
		t.Fatalf("uncork over a broken socket: %v, want %v", err, errSocket)
	}
}

// TestPublishBatchWritesABatchTogether (mode 144) publishes a batch for real and
// counts the writes that reach the socket: amqp091 flushes every message
// on its own, and the publisher's cork (corkConn) sends the batch in a
// few writes instead of one a message.
func TestPublishBatchWritesABatchTogether(t *testing.T) {
	cfg := testConfig(t)
	ctx := testCtx(t)
	p := mustPublisher(t, cfg)
	rec := interpose(p)

	msgs := make([]Message, 200)
	for i := range msgs {
		msgs[i] = Message{ID: strconv.Itoa(i), Body: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
	out, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	for i, o := range out {
		if o != Confirmed {
			t.Fatalf("message %d: %v, want confirmed", i, o)
		}
	}
	// A heartbeat may slip in between; one write a message would be 200.
	if n := rec.count(); n > 5 {
		t.Fatalf("a batch of %d messages took %d writes to the socket, want at most 5", len(msgs), n)
	}
	eventually(t, "queue holds the batch", depthIs(ctx, cfg, cfg.Queue, len(msgs)))
}

// TestPublishBatchLostWithTheSocketIsNeverConfirmed breaks the socket
// under a batch held by the cork (mode 144): the flush fails, the
// connection is closed at once, no message is reported Confirmed and the
// error says the connection was lost — not a confirm timeout, which a
// flush error left unnoticed would end in.
func TestPublishBatchLostWithTheSocketIsNeverConfirmed(t *testing.T) {
	cfg := testConfig(t)
	// No heartbeat within the confirm timeout: only the failed flush can
	// end the batch before that timeout.
	cfg.Heartbeat, cfg.ConfirmTimeout = time.Minute, 3*time.Second
	ctx := testCtx(t)
	p := mustPublisher(t, cfg)
	rec := interpose(p)
	rec.fail.Store(true)

	msgs := []Message{{ID: "1", Body: []byte(`{}`)}, {ID: "2", Body: []byte(`{}`)}, {ID: "3", Body: []byte(`{}`)}}
	out, err := p.PublishBatch(ctx, msgs)
	if !errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrTimeout) {
		t.Fatalf("PublishBatch over a broken socket: %v, want ErrConnectionLost and no timeout", err)
	}
	for i, o := range out {
		if o == Confirmed {
			t.Fatalf("message %d reported confirmed though it never left", i)
		}
	}
	eventually(t, "publisher done", func() error {
		select {
		case <-p.Done():
			return nil
		default:
			return errors.New("not done")
		}
	})
	eventually(t, "nothing reached the queue", depthIs(ctx, cfg, cfg.Queue, 0))
}
