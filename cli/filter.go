package cli

// This file holds the reading of a filter flag that several commands share
// (run list, run delete, dead list and requeue).

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// filterFlag returns the value of a filter flag and whether it was given.
// A filter that is given empty (or blank) is a usage error: an empty value
// never means "no filter", so a script whose variable came out empty fails
// instead of selecting everything.
func filterFlag(c *cli.Context, name string) (string, bool, error) {
	if !c.IsSet(name) {
		return "", false, nil
	}
	v := c.String(name)
	if strings.TrimSpace(v) == "" {
		return "", false, usageError("--%s is empty: give a value, or leave the flag out to select everything", name)
	}
	return v, true, nil
}
