package cli

import (
	"bufio"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// idTarget is what a command on one run or task shares (run show, run
// wait, task show, and the audited actions of idAction): the output
// format, an open store with the client over it, and the id, resolved
// from a full id or a unique prefix. The caller closes s.
type idTarget struct {
	format string
	id     uuid.UUID
	s      *store.Store
	cl     *client.Client
}

// openIDTarget reads -o and the one id argument of kind, runs check (the
// command's other flags; nil for none), and only then opens the store and
// resolves the id (see resolveID): every bad input is refused before the
// store is opened.
func openIDTarget(c *cli.Context, kind store.IDKind, check func() error) (idTarget, error) {
	var t idTarget
	var err error
	if t.format, err = outputFormat(c); err != nil {
		return t, err
	}
	p, err := oneID(c, kind)
	if err != nil {
		return t, err
	}
	if check != nil {
		if err := check(); err != nil {
			return t, err
		}
	}
	if t.s, err = openStore(c); err != nil {
		return t, err
	}
	t.cl = newClient(t.s)
	if t.id, err = resolveID(c.Context, t.s, kind, p); err != nil {
		t.s.Close()
		return t, err
	}
	return t, nil
}

// idAction is an idTarget acted on with an audit reason (run cancel, task
// forget-key), asked for on a terminal (see auditReason) before the store
// is opened.
type idAction struct {
	idTarget
	reason string
}

func newIDAction(c *cli.Context, env *Env, kind store.IDKind, verb, why string) (idAction, error) {
	var a idAction
	var err error
	a.idTarget, err = openIDTarget(c, kind, func() error {
		var err error
		a.reason, err = auditReason(c, env, bufio.NewReader(env.Stdin), verb, why)
		return err
	})
	return a, err
}
