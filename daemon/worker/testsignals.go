package worker

import (
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// testSignals let this package's tests wait for what the worker did
// instead of sleeping (in the manner of River's maintenance services). The
// channels are made by a test and are nil otherwise, when signalling costs
// a nil check; a send never blocks: a full channel drops the value.
type testSignals struct {
	// finished receives every attempt's outcome as execute recorded it (or
	// failed to: see attemptFinished).
	finished chan attemptFinished
	// handedBack receives the task run id of every delivery handBack
	// requeued unclaimed.
	handedBack chan uuid.UUID
	// received receives the task run id of every dispatch consume decoded.
	received chan uuid.UUID
	// lost receives the task run id of every delivery whose claim lost
	// (acked without running).
	lost chan uuid.UUID
	// foreign receives every dispatch of another installation sent back
	// to the queue (forwarded or requeued).
	foreign chan foreignSent
	// gateWaiting receives the task run id of every attempt that found the
	// crash gate closed and waits for it (suspect.go).
	gateWaiting chan uuid.UUID
}

// foreignSent is one dispatch of another installation that the worker
// sent back: its task, the x-delivery-count it arrived with, and what
// became of it (a ForeignDispatchOutcomes label).
type foreignSent struct {
	ID            uuid.UUID
	DeliveryCount int64
	Outcome       string
}

// attemptFinished is what execute did with one attempt: the finish it
// asked for and the store's answer (OK false: rejected by the fencing
// token; Err: not recorded at all).
type attemptFinished struct {
	Req   store.FinishRequest
	State core.TaskState
	OK    bool
	Err   error
}

func (s *testSignals) attemptFinished(f attemptFinished) {
	if s.finished != nil {
		select {
		case s.finished <- f:
		default:
		}
	}
}

func (s *testSignals) deliveryHandedBack(id uuid.UUID) {
	if s.handedBack != nil {
		select {
		case s.handedBack <- id:
		default:
		}
	}
}

func (s *testSignals) claimLost(id uuid.UUID) {
	if s.lost != nil {
		select {
		case s.lost <- id:
		default:
		}
	}
}

func (s *testSignals) deliveryReceived(id uuid.UUID) {
	if s.received != nil {
		select {
		case s.received <- id:
		default:
		}
	}
}

func (s *testSignals) foreignSentBack(f foreignSent) {
	if s.foreign != nil {
		select {
		case s.foreign <- f:
		default:
		}
	}
}

func (s *testSignals) gateWait(id uuid.UUID) {
	if s.gateWaiting != nil {
		select {
		case s.gateWaiting <- id:
		default:
		}
	}
}
