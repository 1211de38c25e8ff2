package scheduler

import "github.com/google/uuid"

// testSignals let this package's tests wait for the scheduler's passes
// instead of sleeping (in the manner of River's maintenance services). The
// channels are made by a test and are nil otherwise; a send never blocks: a
// full channel drops the value.
type testSignals struct {
	// passed receives the result of every pass Run made (nil: it
	// succeeded).
	passed chan error
	// reconnectSwept receives a value each time Run completed the full
	// sweep that a (re)connect of its listener asked for: from then on
	// the listener is connected, and a notification reaches the loop.
	reconnectSwept chan struct{}
	// held receives the runs each targeted pass handed back (another
	// transaction held them).
	held chan []uuid.UUID
}

func (s *testSignals) passDone(err error) {
	if s.passed != nil {
		select {
		case s.passed <- err:
		default:
		}
	}
}

func (s *testSignals) reconnectDone() {
	if s.reconnectSwept != nil {
		select {
		case s.reconnectSwept <- struct{}{}:
		default:
		}
	}
}

func (s *testSignals) heldDone(ids []uuid.UUID) {
	if s.held != nil {
		select {
		case s.held <- ids:
		default:
		}
	}
}
