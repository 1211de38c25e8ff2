package worker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: its consumer, heartbeats, cancel listener and handlers
// must all stop when the test stops them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
