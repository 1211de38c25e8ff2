package publisher

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: Run joins
// its NOTIFY listener, and closes its broker connection, before it
// returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
