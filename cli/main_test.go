package cli_test

import (
	"os"
	"testing"

	"github.com/flowforge/flowforge/cli"
)

// beFFCTL, set in the environment, makes the test binary act as ffctl, so
// shell scripts under test can run "ffctl" without a separate build.
const beFFCTL = "FLOWFORGE_TEST_BE_FFCTL"

func TestMain(m *testing.M) {
	if os.Getenv(beFFCTL) == "1" {
		cli.Main(nil)
	}
	os.Exit(m.Run())
}
