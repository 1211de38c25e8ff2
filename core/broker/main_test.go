package broker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine (ours or amqp091's) outlives the
// tests: every Publisher and Consumer goroutine must stop in Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
