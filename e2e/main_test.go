package e2e

import (
	"os"
	"testing"

	"github.com/flowforge/flowforge/e2e/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
