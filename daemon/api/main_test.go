package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: every server
// a test starts must stop with it, its connections with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
