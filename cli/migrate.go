package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
)

func migrateCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "create or upgrade FlowForge's schema (safe to re-run)",
		UsageText: "ffctl migrate [--lock-timeout 5s] [--lock-retries 5]\n\nExample:\n  FLOWFORGE_DATABASE_URL=postgres://postgres@db:5432/flowforge ffctl migrate",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "lock-timeout", Usage: "lock_timeout of the migration's session: the longest a migration's lock request queues behind another transaction (while every statement on the table queues behind it); 0 waits without bound", Value: store.MigrateLockTimeoutDefault, EnvVars: []string{"FLOWFORGE_MIGRATE_LOCK_TIMEOUT"}},
			&cli.IntFlag{Name: "lock-retries", Usage: "how many times a migration that timed out on a lock is tried again (pausing 1s, 2s, 4s, ... up to 10s)", Value: store.MigrateLockRetriesDefault, EnvVars: []string{"FLOWFORGE_MIGRATE_LOCK_RETRIES"}},
		},
		Action: func(c *cli.Context) error {
			if c.Duration("lock-timeout") < 0 || (c.Duration("lock-timeout") > 0 && c.Duration("lock-timeout") < time.Millisecond) {
				return usageError("--lock-timeout must be 0 (no bound) or at least 1ms")
			}
			if c.Int("lock-retries") < 0 {
				return usageError("--lock-retries must not be negative")
			}
			log, err := logger(c, env)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			s, err := store.Open(ctx, databaseURL(c), store.Options{MaxConns: 2, LockTimeout: c.Duration("lock-timeout"), Logger: log})
			if err != nil {
				return failure(err)
			}
			defer s.Close()
			res, err := s.MigrateRetrying(ctx, store.MigrateRetry{Retries: c.Int("lock-retries")})
			if err != nil {
				return failure(err)
			}
			if len(res.Applied) == 0 {
				if w, err := store.EmbeddedSchemaWindow(); err == nil && res.To > w.Latest {
					fmt.Fprintf(env.Stdout, "schema is up to date (version %d, newer than this ffctl's %d and compatible with it)\n", res.To, w.Latest)
					return nil
				}
				fmt.Fprintf(env.Stdout, "schema is up to date (version %d)\n", res.To)
				return nil
			}
			fmt.Fprintf(env.Stdout, "migrated schema from version %d to %d (%d migrations)\n", res.From, res.To, len(res.Applied))
			return nil
		},
	}
}
