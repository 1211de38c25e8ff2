package scheduler

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: its Run loop and its LISTEN connection
// must all stop when the test stops them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
