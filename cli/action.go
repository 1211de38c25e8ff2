package cli

import (
	"bufio"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
)

// idAction is what an audited operator action on one run or task shares
// (run cancel, task forget-key): the output format, the audit reason (asked
// for on a terminal), an open store and the id, resolved from a full id or
// a unique prefix. Every bad input is refused before the store is opened;
// the caller closes s.
type idAction struct {
	format, reason string
	id             uuid.UUID
	s              *store.Store
}

func newIDAction(c *cli.Context, env *Env, kind store.IDKind, verb, why string) (idAction, error) {
	var a idAction
	var err error
	if a.format, err = outputFormat(c); err != nil {
		return a, err
	}
	p, err := oneID(c, kind)
	if err != nil {
		return a, err
	}
	if a.reason, err = auditReason(c, env, bufio.NewReader(env.Stdin), verb, why); err != nil {
		return a, err
	}
	if a.s, err = openStore(c); err != nil {
		return a, err
	}
	if a.id, err = resolveID(c.Context, a.s, kind, p); err != nil {
		a.s.Close()
		return a, err
	}
	return a, nil
}
