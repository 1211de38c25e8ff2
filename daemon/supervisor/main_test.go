package supervisor_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: Run joins
// every goroutine it starts, and SignalStop's release joins its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
