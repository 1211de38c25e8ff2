package broker

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// seqHeader is the message header carrying the publisher-local sequence
// number of a publish. basic.return carries the returned message's
// properties but not its delivery tag, so the header is what ties a return
// to exactly one publish (MessageId alone is ambiguous when a message is
// republished).
const seqHeader = "flowforge-publish-seq"

// returnsBuffer is the capacity of the channel amqp091 delivers basic.return
// into. amqp091 drops a notification a listener does not take within 5s,
// so the channel is buffered and drained continuously by returnTracker.run.
const returnsBuffer = 1024

// returnTracker drains basic.return notifications of one AMQP channel and
// records which publishes were returned.
//
// Ordering argument: the broker sends basic.return before the basic.ack of
// the same message, and amqp091 handles both on the connection's single
// reader goroutine, handing the return to src before it resolves the
// DeferredConfirmation. So once a publisher has observed a confirmation,
// the matching return is either recorded already or sitting in src's
// buffer; flush drains that buffer before answering, which makes "return
// wins" race-free.
type returnTracker struct {
	src     <-chan amqp.Return
	flushCh chan chan returnSet
	stop    chan struct{}
	done    chan struct{} // closed when run exits

	mu  sync.Mutex
	set returnSet // guarded by mu
}

// returnSet is what a flush hands back.
type returnSet struct {
	seqs map[uint64]struct{} // returned publishes by seqHeader
	ids  map[string]struct{} // MessageIds of returns without a usable seqHeader
}

func newReturnSet() returnSet {
	return returnSet{seqs: map[uint64]struct{}{}, ids: map[string]struct{}{}}
}

func (s returnSet) has(seq uint64, id string) bool {
	if _, ok := s.seqs[seq]; ok {
		return true
	}
	_, ok := s.ids[id]
	return ok
}

func newReturnTracker(src <-chan amqp.Return) *returnTracker {
	return &returnTracker{
		src:     src,
		flushCh: make(chan chan returnSet),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		set:     newReturnSet(),
	}
}

// run drains src until it is closed (channel closed) or stop is closed.
func (t *returnTracker) run() {
	defer close(t.done)
	for {
		select {
		case r, ok := <-t.src:
			if !ok {
				return
			}
			t.record(r)
		case reply := <-t.flushCh:
			closed := t.drainBuffered()
			reply <- t.take()
			if closed {
				return
			}
		case <-t.stop:
			return
		}
	}
}

// drainBuffered records every return already buffered in src. It reports
// whether src is closed.
func (t *returnTracker) drainBuffered() (closed bool) {
	for {
		select {
		case r, ok := <-t.src:
			if !ok {
				return true
			}
			t.record(r)
		default:
			return false
		}
	}
}

func (t *returnTracker) record(r amqp.Return) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq, ok := headerSeq(r.Headers); ok {
		t.set.seqs[seq] = struct{}{}
	} else {
		t.set.ids[r.MessageId] = struct{}{}
	}
}

// take returns everything recorded so far and starts a fresh set. Returns
// of publishes of earlier, abandoned batches are discarded with it; they
// can never match a later publish because sequence numbers are not reused.
func (t *returnTracker) take() returnSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.set
	t.set = newReturnSet()
	return s
}

// flush returns every return received so far, including those still
// buffered in src. After run exited it returns what run recorded.
func (t *returnTracker) flush() returnSet {
	reply := make(chan returnSet, 1)
	select {
	case t.flushCh <- reply:
		return <-reply
	case <-t.done:
		// run is gone: drain what it left behind (src may still hold
		// buffered returns if run stopped via t.stop).
		t.drainBuffered()
		return t.take()
	}
}

// headerSeq extracts seqHeader from returned message headers.
func headerSeq(h amqp.Table) (uint64, bool) {
	switch v := h[seqHeader].(type) {
	case int64:
		return uint64(v), v > 0
	case int32:
		return uint64(v), v > 0
	case uint64:
		return v, v > 0
	case uint32:
		return uint64(v), v > 0
	default:
		return 0, false
	}
}
