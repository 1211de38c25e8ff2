package cli

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/daemon/pruner"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// retentionFlags are the pruner's flags of `ffctl daemon scheduler|all`.
// The ages are age filters (parseAge: Go durations and days, "7d").
func retentionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "prune", Value: true, Usage: "scheduler: run the retention pruner (--prune=false turns it off)", EnvVars: []string{"FLOWFORGE_PRUNE"}},
		&cli.DurationFlag{Name: "prune-interval", Value: pruner.IntervalDefault, Usage: "scheduler: period of the retention pruner's passes", EnvVars: []string{"FLOWFORGE_PRUNE_INTERVAL"}},
		&cli.StringFlag{Name: "retain-succeeded", Value: "7d", Usage: "scheduler: prune a SUCCEEDED run this long after it finished (such as 7d, 36h)", EnvVars: []string{"FLOWFORGE_RETAIN_SUCCEEDED"}},
		&cli.StringFlag{Name: "retain-cancelled", Value: "7d", Usage: "scheduler: prune a CANCELLED run holding no DEAD task this long after it finished", EnvVars: []string{"FLOWFORGE_RETAIN_CANCELLED"}},
		&cli.StringFlag{Name: "retain-dead", Usage: "scheduler: prune a run holding a DEAD task (every FAILED run) this long after it finished; unset (the default) never prunes one", EnvVars: []string{"FLOWFORGE_RETAIN_DEAD"}},
		&cli.StringFlag{Name: "retain-outbox", Value: "1d", Usage: "scheduler: prune a published outbox row this long after it was published", EnvVars: []string{"FLOWFORGE_RETAIN_OUTBOX"}},
	}
}

// retentionConfig maps the retention flags into cfg (Pruner, NoPrune).
// A zero age ("0", "0d", "0s") is the Config's default (for --retain-dead:
// off, as unset is).
// Errors (usage): an empty age, one that does not parse; bounds are the
// Config's.
func retentionConfig(c *cli.Context, cfg *supervisor.Config) error {
	cfg.NoPrune = !c.Bool("prune")
	cfg.Pruner.Interval = c.Duration("prune-interval")
	for _, f := range []struct {
		name string
		to   *time.Duration
	}{
		{"retain-succeeded", &cfg.Pruner.RetainSucceeded},
		{"retain-cancelled", &cfg.Pruner.RetainCancelled},
		{"retain-dead", &cfg.Pruner.RetainDead},
		{"retain-outbox", &cfg.Pruner.RetainOutbox},
	} {
		v := strings.TrimSpace(c.String(f.name))
		switch {
		case v == "" && f.name == "retain-dead":
			*f.to = 0 // off
			continue
		case v == "":
			return usageError("--%s is empty: give an age such as 7d or 36h, or 0 for the default", f.name)
		}
		// A zero age, however spelt, is the Config's default (RetainDead:
		// off), as every 0 of ffctl's flags.
		d, err := parseAgeOrZero(v)
		if err != nil {
			return usageError("--%s: %v", f.name, err)
		}
		*f.to = d
	}
	return nil
}
