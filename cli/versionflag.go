package cli

import "github.com/urfave/cli/v2"

// versionFlag reads a command's --version (a workflow version): 0 when the
// flag is not given, meaning the newest version; a given value must be at
// least 1, versions being numbered from 1, so `--version 0` is a usage
// error rather than a quiet "newest".
func versionFlag(c *cli.Context) (int, error) {
	v := c.Int("version")
	if c.IsSet("version") && v < 1 {
		return 0, usageError("--version %d: versions are numbered from 1 (leave --version out for the newest)", v)
	}
	return v, nil
}
