package cli

import (
	"context"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// dbSessionFlags are the daemons' flags for the bounds of their database
// sessions and for the xmin-horizon watcher (package dbhealth).
func dbSessionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "db-statement-timeout", Usage: "statement_timeout of every database session of the daemon; 0 keeps the server's default", Value: store.StatementTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_STATEMENT_TIMEOUT"}},
		&cli.DurationFlag{Name: "db-lock-timeout", Usage: "lock_timeout of every database session of the daemon (at most --db-statement-timeout); 0 keeps the server's default", Value: store.LockTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_LOCK_TIMEOUT"}},
		&cli.DurationFlag{Name: "db-idle-in-transaction-timeout", Usage: "idle_in_transaction_session_timeout of every database session of the daemon; must exceed the publisher's confirm timeout by 5s; 0 keeps the server's default", Value: store.IdleInTxTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_IDLE_IN_TRANSACTION_TIMEOUT"}},
		&cli.DurationFlag{Name: "xmin-horizon-warn", Usage: "warn when a transaction, prepared transaction or replication slot has held the database's xmin horizon back this long", Value: dbhealth.WarnDefault, EnvVars: []string{"FLOWFORGE_XMIN_HORIZON_WARN"}},
		&cli.DurationFlag{Name: "db-health-interval", Usage: "period of the read of the oldest transaction, the xmin horizon and the hot tables' dead tuples (metrics flowforge_db_*)", Value: dbhealth.IntervalDefault, EnvVars: []string{"FLOWFORGE_DB_HEALTH_INTERVAL"}},
	}
}

// sessionURL validates the session-bound flags and returns the database URL
// carrying them, so that every connection of the daemon (its pools and its
// LISTEN connections) is bounded. A publisher keeps its batch transaction
// idle while it waits for confirms (bcfg's confirm timeout), so for the
// roles that publish the idle-in-transaction timeout must exceed it.
func sessionURL(c *cli.Context, role string, bcfg broker.Config) (string, error) {
	opt := store.Options{
		StatementTimeout: c.Duration("db-statement-timeout"),
		LockTimeout:      c.Duration("db-lock-timeout"),
		IdleInTxTimeout:  c.Duration("db-idle-in-transaction-timeout"),
	}
	var idleHeld = bcfg.ConfirmTimeout
	if idleHeld == 0 {
		idleHeld = broker.DefaultConfirmTimeout
	}
	if role != "publisher" && role != "all" {
		idleHeld = 0
	}
	if err := opt.ValidateSession(idleHeld); err != nil {
		return "", usageError("--db-statement-timeout, --db-lock-timeout, --db-idle-in-transaction-timeout: %v", err)
	}
	if c.Duration("xmin-horizon-warn") <= 0 || c.Duration("db-health-interval") <= 0 {
		return "", usageError("--xmin-horizon-warn and --db-health-interval must be positive")
	}
	u, err := store.SessionURL(databaseURL(c), opt)
	if err != nil {
		return "", usageError("--database-url: %v", err)
	}
	return u, nil
}

// watchDBHealth runs the xmin-horizon watcher until ctx ends.
func watchDBHealth(ctx context.Context, c *cli.Context, st *store.Store, m *metrics.Metrics, log *slog.Logger) {
	w, err := dbhealth.New(dbhealth.Config{Store: st, Interval: c.Duration("db-health-interval"), Warn: c.Duration("xmin-horizon-warn"), Logger: log, Metrics: m})
	if err != nil {
		log.Error("daemon: dbhealth", "err", err) // validated in sessionURL; cannot happen
		return
	}
	_ = w.Run(ctx)
}
