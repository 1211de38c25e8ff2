package cli

// This file holds the filters of `ffctl run list`: --workflow, --state,
// --before, --since, --until and --param, read into a store.RunFilter.

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// runListFilterFlags are run list's filter flags beyond --workflow,
// --state and --before.
func runListFilterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "since", Usage: "only runs created at or after this: an RFC 3339 time, or an age such as 2h, 90m or 3d meaning that long ago (database clock)"},
		&cli.StringFlag{Name: "until", Usage: "only runs created at or before this: an RFC 3339 time or an age, as --since"},
		&cli.StringSliceFlag{Name: "param", Aliases: []string{"p"}, Usage: "only runs whose top-level param key equals value (as a string, or as JSON when value is JSON); repeatable, every one must match"},
	}
}

// runListFilter reads run list's filters. Errors (usage): a filter given
// empty (filterFlag), a bad state, workflow name, time or age, a --param
// without "=" or with an empty key, a limit out of bounds.
func runListFilter(c *cli.Context) (store.RunFilter, error) {
	var f store.RunFilter
	st, _, err := filterFlag(c, "state")
	if err != nil {
		return f, err
	}
	f.State = core.RunState(strings.ToUpper(st))
	if f.State != "" && !f.State.Valid() {
		return f, usageError("--state %q: want one of %v", c.String("state"), core.RunStates)
	}
	if f.Limit, err = checkLimit(c); err != nil {
		return f, err
	}
	if f.Workflow, _, err = filterFlag(c, "workflow"); err != nil {
		return f, err
	}
	if f.Workflow != "" {
		if err := core.ValidateName("workflow", f.Workflow); err != nil {
			return f, usageError("--workflow: %v", err)
		}
	}
	b, _, err := filterFlag(c, "before")
	if err != nil {
		return f, err
	}
	if b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			return f, usageError("--before %q: want an RFC 3339 time such as 2026-11-30T03:00:00Z", b)
		}
		f.Before = &t
	}
	if f.Since, err = timeBoundFlag(c, "since"); err != nil {
		return f, err
	}
	if f.Until, err = timeBoundFlag(c, "until"); err != nil {
		return f, err
	}
	for _, kv := range c.StringSlice("param") {
		p, err := core.ParseParamFilter(kv)
		if err != nil {
			return f, usageError("--param %s", strings.TrimPrefix(err.Error(), core.ErrBadParams.Error()+": "))
		}
		f.Params = append(f.Params, p)
	}
	return f, nil
}

// timeBoundFlag reads --since or --until: an RFC 3339 time, or an age
// (parseAge: 2h, 90m, 3d) that the store measures back from the database's
// now(). Errors (usage): given empty, neither form.
func timeBoundFlag(c *cli.Context, name string) (store.TimeBound, error) {
	v, ok, err := filterFlag(c, name)
	if err != nil || !ok {
		return store.TimeBound{}, err
	}
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return store.TimeBound{At: &t}, nil
	}
	d, err := parseAgeOrZero(v)
	switch {
	case err == nil && d == 0:
		return store.TimeBound{}, usageError("--%s %q: an age must be positive (leave the flag out for no bound)", name, c.String(name))
	case err != nil && strings.Contains(err.Error(), "too long"):
		return store.TimeBound{}, usageError("--%s %v", name, err)
	case err != nil:
		return store.TimeBound{}, usageError("--%s %q: want an RFC 3339 time such as 2026-11-30T03:00:00Z, or an age such as 2h, 90m or 3d (that long ago)", name, c.String(name))
	}
	return store.TimeBound{Ago: d}, nil
}
