package pruner

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: Run stops
// when its context ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
