package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// limitsCommand is `ffctl limits`: the flow-control keys (concurrency
// keys and rate limits) with their holders and waiters, and the
// operator's limit of a key (store.ListLimits, store.SetLimit).
func limitsCommand(env *Env) *cli.Command {
	kindFlag := &cli.StringFlag{Name: "kind", Usage: "concurrency, rate or run (a workflow's run-level key; default: every kind that has the key)"}
	return &cli.Command{
		Name:  "limits",
		Usage: "flow control: concurrency keys and rate limits, their use and the operator's limits",
		UsageText: "ffctl limits list|set|reset ...\n\n" +
			"Example:\n  ffctl limits list\n  ffctl limits set customer-42 --limit 2 --reason 'customer asked us to slow down'",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the flow-control keys, hottest first (most waiting, then most in use)",
				UsageText: "ffctl limits list [--limit N] [-o json]\n\n" +
					"One row per key and kind: its limit (\"(set)\" when an operator set it), how many task runs\n" +
					"hold a slot (concurrency: admitted and not finished) or started within the window (rate),\n" +
					"how many wait for it (READY, not dispatched) and how long the oldest has waited. A key\n" +
					"appears once a task using it has waited, or once an operator set its limit.\n\n" +
					"Example:\n  ffctl limits list",
				Flags:  []cli.Flag{limitFlag(store.LimitsShownDefault), outputFlag()},
				Action: func(c *cli.Context) error { return limitsList(c, env) },
			},
			{
				Name:  "set",
				Usage: "set the operator's limit of a key (audited): it wins over the definitions' limit",
				UsageText: "ffctl limits set KEY --limit N --reason R [--kind concurrency|rate|run] [-o json]\n\n" +
					"A raised limit admits waiting tasks at once. A limit lowered below the number in use takes\n" +
					"no slot back: the running tasks finish and none is admitted until fewer than the limit hold\n" +
					"one. A concurrency (or run) key nothing waited for yet is created with --kind concurrency (run); a rate key\n" +
					"exists once a task using it has waited (its period comes from the definition).\n\n" +
					"Example:\n  ffctl limits set customer-42 --limit 2 --reason 'customer asked us to slow down'",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "limit", Usage: fmt.Sprintf("the limit: 1 to %d for a concurrency key, 1 to %d for a rate key (required)", core.MaxConcurrencyLimit, core.MaxRateLimit)},
					reasonFlag(requiredReason("why the limit changes")),
					kindFlag, outputFlag(),
				},
				Action: func(c *cli.Context) error { return limitsSet(c, env, true) },
			},
			{
				Name:  "reset",
				Usage: "drop the operator's limit of a key (audited): the definitions' limit applies again",
				UsageText: "ffctl limits reset KEY --reason R [--kind concurrency|rate|run] [-o json]\n\n" +
					"Example:\n  ffctl limits reset customer-42 --reason 'back to normal'",
				Flags:  []cli.Flag{reasonFlag(requiredReason("why the limit changes")), kindFlag, outputFlag()},
				Action: func(c *cli.Context) error { return limitsSet(c, env, false) },
			},
		},
	}
}

func limitsList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("limits list takes no arguments")
	}
	n, err := checkLimit(c)
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	ls, err := s.ListLimits(c.Context, n)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		if ls == nil {
			ls = []store.FlowLimit{}
		}
		return writeJSON(env.Stdout, ls)
	}
	if len(ls) == 0 {
		fmt.Fprintln(env.Stdout, "no flow-control keys (a key appears once a scheduler has seen a task wait for it)")
		return nil
	}
	t := newTable(env.Stdout, env.colours(), "KIND", "KEY", "LIMIT", "IN USE", "WAITING", "OLDEST WAIT")
	for _, l := range ls {
		oldest := "-"
		if l.Waiting > 0 {
			oldest = core.CompactDuration(time.Duration(l.OldestWaitSeconds * float64(time.Second)))
		}
		t.row(l.Kind, core.FlowKeyText(l.Key), l.LimitText(), strconv.Itoa(l.InUse), strconv.Itoa(l.Waiting), oldest)
	}
	return t.flush()
}

// limitsSet is `limits set` (set true: --limit required) and `limits
// reset`.
func limitsSet(c *cli.Context, env *Env, set bool) error {
	verb := map[bool]string{true: "set", false: "reset"}[set]
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return usageError("limits %s takes one key", verb)
	}
	req := store.SetLimitRequest{Key: c.Args().First(), Kind: c.String("kind"), Actor: actor()}
	if c.IsSet("kind") && req.Kind == "" {
		return usageError("--kind is empty: want %s, %s or %s (leave --kind out for every kind that has the key)", store.FlowConcurrency, store.FlowRate, store.FlowRun)
	}
	if req.Kind != "" && req.Kind != store.FlowConcurrency && req.Kind != store.FlowRate && req.Kind != store.FlowRun {
		return usageError("--kind %q: want %s, %s or %s", req.Kind, store.FlowConcurrency, store.FlowRate, store.FlowRun)
	}
	if set {
		if !c.IsSet("limit") {
			return usageError("limits set: --limit is required (limits reset drops the operator's limit)")
		}
		n := c.Int("limit")
		req.Limit = &n
	}
	if req.Reason, err = auditReason(c, env, bufio.NewReader(env.Stdin), "limit change", "why the limit changes"); err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.SetLimit(c.Context, req)
	switch {
	case errors.Is(err, store.ErrBadLimit), errors.Is(err, core.ErrBadReason):
		return usageError("%v", err)
	case err != nil:
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, res)
	}
	for _, ch := range res.Changes {
		old := "none (new key)"
		if ch.Old != nil {
			old = strconv.Itoa(*ch.Old)
		}
		if ch.Forgotten {
			fmt.Fprintf(env.Stdout, "%s %s: limit %s -> forgotten (no task holds or waits for the key; the next waiter brings its definition's limit)\n", ch.Kind, core.FlowKeyText(ch.Key), old)
			continue
		}
		what := "set by the operator"
		if !set {
			what = "the definitions' limit"
		}
		if ch.Unchanged {
			what = "unchanged: already the operator's limit; nothing audited"
		}
		fmt.Fprintf(env.Stdout, "%s %s: limit %s -> %d (%s)\n", ch.Kind, core.FlowKeyText(ch.Key), old, ch.New, what)
	}
	return nil
}
