package cli_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/flowforge/flowforge/cli"
)

// beFFCTL, set in the environment, makes the test binary act as ffctl, so
// shell scripts under test can run "ffctl" without a separate build.
const beFFCTL = "FLOWFORGE_TEST_BE_FFCTL"

// TestMain fails the run if any goroutine outlives the tests: cli starts
// none of its own, and every command it runs in-process (daemons
// included) must have joined theirs when Run returns.
func TestMain(m *testing.M) {
	if os.Getenv(beFFCTL) == "1" {
		cli.Main(nil)
	}
	goleak.VerifyTestMain(m)
}
