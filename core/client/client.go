package client

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// Options tunes a Client. The zero value is ready to use.
type Options struct {
	// Actor names the client in the history its writes record (Cancel,
	// RequeueDead) when a call gives none; empty means
	// core.OSActor("client"): "client:USER@HOST".
	Actor string
	// Logger receives nothing on the hot path; nil discards.
	Logger *slog.Logger
	// TracerProvider records a flowforge.trigger span of each Trigger (and
	// TriggerTx, TriggerSQLTx), whose trace the run's every span joins
	// (package tracing); nil is the no-op provider, with which a trigger
	// whose context carries a span still continues that span's trace.
	TracerProvider trace.TracerProvider
}

// Client starts and inspects FlowForge runs from a Go program: it triggers
// runs (on its pool, or inside a transaction of the caller's), reads them
// as `ffctl run show -o json` shows them, waits for them, cancels them and
// requeues DEAD tasks. It is safe for concurrent use, and it caches the
// workflow definitions it triggered (as ffctl's daemons do), each checked
// by the trigger's statement to still be the newest version.
type Client struct {
	s      *store.Store
	actor  string
	tracer trace.Tracer
	// closeStore: Close closes s (a Store the Client opened over a pool).
	closeStore bool
}

// New returns a Client on pool, a pgx pool of the caller's on a database
// migrated by `ffctl migrate` (its schema is not checked: see CheckSchema).
// The Client uses the pool's connections and settings; Close releases
// what the Client holds of it, and the caller closes pool after.
func New(pool *pgxpool.Pool, opts Options) *Client {
	return newClient(store.FromPool(pool, opts.Logger), opts, true)
}

// NewDB returns a Client on db, a database/sql pool of the caller's whose
// driver is pgx's (sql.Open("pgx", url) with package
// github.com/jackc/pgx/v5/stdlib imported), on a database migrated by
// `ffctl migrate`. Close does not close db. Errors: a db of another driver
// (ErrInvalidInput).
func NewDB(db *sql.DB, opts Options) (*Client, error) {
	s, err := store.FromDB(db, opts.Logger)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return newClient(s, opts, false), nil
}

// FromStore returns a Client on s, a Store the caller opened (ffctl's
// commands do), which stays the caller's to close.
func FromStore(s *store.Store, opts Options) *Client {
	return newClient(s, opts, false)
}

func newClient(s *store.Store, opts Options, closeStore bool) *Client {
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Client{s: s, actor: opts.Actor, closeStore: closeStore, tracer: tracing.Tracer(tp)}
}

// Close releases what the Client holds: for a Client from New, its
// database/sql handle over the pool (not the pool itself); for one from
// NewDB or FromStore, nothing (the pool and the store are the caller's).
func (c *Client) Close() error {
	if c.closeStore {
		return c.s.Close()
	}
	return nil
}

// actorOr returns actor, or when it is empty the Client's (its Options',
// else core.OSActor("client"), read when a write needs it).
func (c *Client) actorOr(actor string) string {
	switch {
	case actor != "":
		return actor
	case c.actor != "":
		return c.actor
	}
	return core.OSActor("client")
}

// invalid is bad input the client itself refuses: an error with the text
// format and args make that matches ErrInvalidInput.
func invalid(format string, args ...any) error {
	return &kindError{err: fmt.Errorf(format, args...), kinds: []error{ErrInvalidInput}}
}

// CheckSchema returns nil when this module's code may run on the
// database's schema (store.Store.CheckSchema): it was migrated by `ffctl
// migrate` of a compatible version. Errors: one wrapping
// store.ErrSchemaOutdated (run `ffctl migrate`) or store.ErrSchemaTooNew
// (the database was migrated by a newer FlowForge: upgrade this module),
// or the database's.
func (c *Client) CheckSchema(ctx context.Context) error { return c.s.CheckSchema(ctx) }
