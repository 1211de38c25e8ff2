package cli

import (
	"context"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/tui"
)

// tuiCommand is `ffctl tui`, the operator's live dashboard. It writes no
// logs: the terminal belongs to the dashboard.
func tuiCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "tui",
		Usage:     "live dashboard: runs, a run's tasks, leases, outbox, DEAD tasks (requeue), workers, workflows (trigger, pause), schedules",
		UsageText: "ffctl tui [--refresh D] [--readonly]\n\nKeys: 1-8 or tab switch screens, ? lists every key, q quits.\nNO_COLOR set: no colours.\n\nExample:\n  ffctl tui --refresh 1s --readonly",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "refresh", Usage: "how often the screen re-reads the database", Value: tui.RefreshDefault, EnvVars: []string{"FLOWFORGE_TUI_REFRESH"}},
			&cli.BoolFlag{Name: "readonly", Usage: "hide the actions (requeue, cancel)", EnvVars: []string{"FLOWFORGE_TUI_READONLY"}},
			&cli.DurationFlag{Name: "xmin-horizon-warn", Usage: "warn on the Outbox screen when the database's xmin horizon has been held back this long", Value: store.XminHorizonWarnDefault, EnvVars: []string{"FLOWFORGE_TUI_XMIN_HORIZON_WARN"}},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError("tui takes no arguments (got %q)", c.Args().First())
			}
			refresh := c.Duration("refresh")
			if refresh < tui.RefreshMin {
				return usageError("--refresh %s: want at least %s", refresh, tui.RefreshMin)
			}
			if !isTerminal(env.Stdout) {
				return usageError("tui: standard output is not a terminal")
			}
			info, err := configuredInstallation(c, env)
			if err != nil {
				return err
			}
			s, err := openStore(c)
			if err != nil {
				return err
			}
			defer s.Close()
			// The header names the installation; one that cannot be read
			// is shown as unknown (the screens say what fails).
			ictx, cancel := context.WithTimeout(c.Context, 5*time.Second)
			in, _ := s.Installation(ictx)
			cancel()
			src := tui.NewStoreSource(s, actor())
			src.HorizonWarn = c.Duration("xmin-horizon-warn")
			err = tui.Run(c.Context, src, tui.Options{
				Refresh:      refresh,
				ReadOnly:     c.Bool("readonly"),
				NoColor:      os.Getenv("NO_COLOR") != "",
				Output:       env.Stdout,
				Input:        env.Stdin,
				Installation: dashboardInstallation(info, in),
			})
			return failure(err)
		},
	}
}
