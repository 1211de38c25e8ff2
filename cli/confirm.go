package cli

// This file holds --yes: the flag of a command that asks before it acts and
// the asking (confirm).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// confirm asks a yes/no question on standard error; only "y" or "yes" is a
// yes.
func confirm(env *Env, in *bufio.Reader, question string) (bool, error) {
	fmt.Fprint(env.Stderr, question)
	line, err := in.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, usageError("read answer: %v", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// yesFlag is the --yes (-y) flag of a command that asks for confirmation
// (confirm) on a terminal; usage is its help text, which says when it is
// needed.
func yesFlag(usage string) cli.Flag {
	return &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: usage}
}
