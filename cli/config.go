package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// AMQPURLDefault is where FlowForge looks for RabbitMQ when no URL is
// configured.
const AMQPURLDefault = "amqp://guest:guest@127.0.0.1:5672/"

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL URL", Value: store.DatabaseURLDefault, EnvVars: []string{"FLOWFORGE_DATABASE_URL"}},
		&cli.StringFlag{Name: "amqp-url", Usage: "RabbitMQ URL; several (cluster nodes) separated by commas", Value: AMQPURLDefault, EnvVars: []string{"FLOWFORGE_AMQP_URL"}},
		&cli.StringFlag{Name: "queue", Usage: "dispatch queue name", Value: broker.QueueDefault, EnvVars: []string{"FLOWFORGE_QUEUE"},
			Action: func(_ *cli.Context, v string) error { return checkQueue(v) }},
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: []string{"FLOWFORGE_LOG_LEVEL"},
			Action: func(_ *cli.Context, v string) error { return checkLogLevel(v) }},
	}
}

func databaseURL(c *cli.Context) string { return c.String("database-url") }

func brokerConfig(c *cli.Context, log *slog.Logger) broker.Config {
	var urls []string
	for _, u := range strings.Split(c.String("amqp-url"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return broker.Config{URLs: urls, Queue: c.String("queue"), Logger: log, Cursor: &broker.Cursor{}}
}

// checkLogLevel refuses a --log-level (FLOWFORGE_LOG_LEVEL) that is not
// one of slog's levels as bad input (exit 2), for every command: one that
// logs nothing would otherwise ignore it and exit 0.
func checkLogLevel(v string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(v)); err != nil {
		return usageError("--log-level (FLOWFORGE_LOG_LEVEL): %q is not debug, info, warn or error", v)
	}
	return nil
}

// checkQueue refuses an empty --queue (FLOWFORGE_QUEUE=): set but empty,
// `status` showed no queue while a daemon used the default one, shared
// with every other stack that left it unset (a trial's workers joined it).
func checkQueue(v string) error {
	if v == "" {
		return usageError("--queue (FLOWFORGE_QUEUE) is empty: name the dispatch queue, or leave it unset for %s", broker.QueueDefault)
	}
	return nil
}

func logger(c *cli.Context, env *Env) (*slog.Logger, error) {
	if err := checkLogLevel(c.String("log-level")); err != nil {
		return nil, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.String("log-level")))
	return slog.New(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: level})), nil
}

// quietLogger is logger for a command whose output is for a person (events
// tail): at warn unless --log-level (FLOWFORGE_LOG_LEVEL) says otherwise,
// so that its standard error holds its own notes, not a daemon's JSON
// records of connecting (a trial found "broker: connected" there).
func quietLogger(c *cli.Context, env *Env) (*slog.Logger, error) {
	if c.IsSet("log-level") {
		return logger(c, env)
	}
	return slog.New(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), nil
}

// openStore connects to the database for a one-shot command and checks the
// schema. The schema check is the connection's first query (the store is
// OneShot: no ping before it), so a cold start pays the connection set-up
// and one round trip; a database that does not answer is reported as
// store.Open reports it.
// checkDatabaseURL refuses a database URL that does not parse as bad
// input (exit 2): a command would report it as a failure to connect
// (exit 1) and a daemon would retry it for ever. The message never holds
// the password (store.CheckURL masks it).
func checkDatabaseURL(raw string) error {
	if err := store.CheckURL(raw); err != nil {
		return usageError("--database-url (FLOWFORGE_DATABASE_URL): %v", err)
	}
	return nil
}

func openStore(c *cli.Context) (*store.Store, error) {
	if err := checkDatabaseURL(databaseURL(c)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, 15*time.Second)
	defer cancel()
	s, err := store.Open(ctx, databaseURL(c), store.Options{MaxConns: 4, OneShot: true})
	if err != nil {
		return nil, failure(err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		s.Close()
		if !errors.Is(err, store.ErrSchemaOutdated) && !errors.Is(err, store.ErrSchemaTooNew) {
			err = fmt.Errorf("connect to database %s: %w", store.RedactURL(databaseURL(c)), err)
		}
		return nil, failure(err)
	}
	return s, nil
}

// newClient is the client over s (ffctl's commands use it for what it
// offers: one path with every other program's triggers and reads), acting
// as actor().
func newClient(s *store.Store) *client.Client {
	return client.FromStore(s, client.Options{Actor: actor()})
}

// actor names the person or process behind a CLI action in the audit trail:
// "cli:USER@HOST" (core.OSActor).
func actor() string { return core.OSActor("cli") }

// withClient opens the store, runs q with a client on it (opts) and closes
// it. An error from q goes through clientFailure (exit 2 for bad input,
// else 1).
func withClient[T any](c *cli.Context, opts client.Options, q func(ctx context.Context, cl *client.Client) (T, error)) (T, error) {
	var zero T
	s, err := openStore(c)
	if err != nil {
		return zero, err
	}
	defer s.Close()
	v, err := q(c.Context, client.FromStore(s, opts))
	if err != nil {
		return zero, clientFailure(err)
	}
	return v, nil
}

// query opens the store for one read, runs q with it and closes it. An
// error from q is a failed operation (exit 1).
func query[T any](c *cli.Context, q func(ctx context.Context, s *store.Store) (T, error)) (T, error) {
	var zero T
	s, err := openStore(c)
	if err != nil {
		return zero, err
	}
	defer s.Close()
	v, err := q(c.Context, s)
	if err != nil {
		return zero, failure(err)
	}
	return v, nil
}
