package health

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: its HTTP server
// must all stop when the test stops them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
