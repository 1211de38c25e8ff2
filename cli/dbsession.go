package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/dbhealth"
)

// dbSessionFlags are the daemons' flags for the bounds of their database
// sessions and for the xmin-horizon watcher (package dbhealth). Their
// bounds are checked by supervisor.Config.Validate.
func dbSessionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "db-statement-timeout", Usage: "statement_timeout of every database session of the daemon; 0 keeps the server's default", Value: store.StatementTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_STATEMENT_TIMEOUT"}},
		&cli.DurationFlag{Name: "db-lock-timeout", Usage: "lock_timeout of every database session of the daemon (at most --db-statement-timeout); 0 keeps the server's default", Value: store.LockTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_LOCK_TIMEOUT"}},
		&cli.DurationFlag{Name: "db-idle-in-transaction-timeout", Usage: "idle_in_transaction_session_timeout of every database session of the daemon; must exceed the publisher's confirm timeout by 5s; 0 keeps the server's default", Value: store.IdleInTxTimeoutDefault, EnvVars: []string{"FLOWFORGE_DB_IDLE_IN_TRANSACTION_TIMEOUT"}},
		&cli.DurationFlag{Name: "xmin-horizon-warn", Usage: "warn when a transaction, prepared transaction or replication slot has held the database's xmin horizon back this long", Value: dbhealth.WarnDefault, EnvVars: []string{"FLOWFORGE_XMIN_HORIZON_WARN"}},
		&cli.DurationFlag{Name: "db-health-interval", Usage: "period of the read of the oldest transaction, the xmin horizon and the hot tables' dead tuples (metrics flowforge_db_*)", Value: dbhealth.IntervalDefault, EnvVars: []string{"FLOWFORGE_DB_HEALTH_INTERVAL"}},
	}
}
