package cli

// This file holds --reason: the flag every audited command takes and the
// reading of it (auditReason).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
)

// auditReason returns --reason, or asks for it on a terminal, for the
// audited action verb; why ends the missing-reason error ("why the task
// is requeued"). Errors (usage): a reason core.ValidateReason refuses
// (blank, too long, a NUL character).
func auditReason(c *cli.Context, env *Env, in *bufio.Reader, verb, why string) (string, error) {
	reason := strings.TrimSpace(c.String("reason"))
	if reason == "" && !c.IsSet("reason") && env.interactive() {
		fmt.Fprintf(env.Stderr, "Reason for the %s (recorded in the audit trail): ", verb)
		line, err := in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", usageError("read reason: %v", err)
		}
		reason = strings.TrimSpace(line)
	}
	if err := core.ValidateReason(reason); errors.Is(err, core.ErrNoReason) {
		return "", usageError("--reason is required: say %s (it is audited)", why)
	} else if err != nil {
		return "", usageError("--reason: %v", err)
	}
	return reason, nil
}

// reasonFlag is the --reason flag of an audited command; usage is its help
// text, which says what the reason is for and whether it is required
// (requiredReason, optionalReason, or the command's own).
func reasonFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "reason", Usage: usage}
}

// requiredReason is the --reason usage of a command that refuses to run
// without a reason (auditReason): why, then how it is read and kept.
func requiredReason(why string) string {
	return why + " (required: prompted for on a terminal; recorded in the audit trail)"
}

// optionalReason is the --reason usage of a command that runs without one.
const optionalReason = "why (optional; recorded in the audit trail)"
