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
		UsageText: "ffctl migrate\n\nExample:\n  FLOWFORGE_DATABASE_URL=postgres://postgres@db:5432/flowforge ffctl migrate",
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			s, err := store.Open(ctx, databaseURL(c), store.Options{MaxConns: 2})
			if err != nil {
				return failure(err)
			}
			defer s.Close()
			res, err := s.Migrate(ctx)
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

func versionCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print ffctl's version and the schema versions it runs against",
		UsageText: "ffctl version\n\nExample:\n  ffctl version   # also: ffctl --version",
		Action: func(c *cli.Context) error {
			w, err := store.EmbeddedSchemaWindow()
			if err != nil {
				return failure(err)
			}
			fmt.Fprintf(env.Stdout, "ffctl %s\nschema: runs on versions %d and newer, knows up to %d (a database whose compat floor is above %d needs a newer ffctl)\n", Version, w.Min, w.Latest, w.Latest)
			return nil
		},
	}
}
