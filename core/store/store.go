package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
	"github.com/jmoiron/sqlx"
)

// DatabaseURLDefault is where FlowForge looks for PostgreSQL when no URL is
// configured.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/flowforge?sslmode=disable"

// Sentinel errors returned by Store methods.
var (
	// ErrNotFound: the workflow, run or task named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request contradicts what is stored (for example an
	// idempotency key reused with different params).
	ErrConflict = errors.New("conflict")
	// ErrSchemaOutdated: the database is not migrated to this binary's
	// schema; run `ffctl migrate`.
	ErrSchemaOutdated = errors.New("database schema is not up to date")
	// ErrSchemaTooNew: the database was migrated by a newer ffctl.
	ErrSchemaTooNew = errors.New("database schema is newer than this ffctl")
	// ErrWorkflowPaused: the workflow is paused with mode drop, so a trigger
	// or a schedule tick of it creates no run (the drop is counted on the
	// pause). A pause with mode queue never returns it: its runs are created
	// and wait.
	ErrWorkflowPaused = errors.New("workflow is paused (mode drop): the trigger was dropped")
)

// Options tunes the connection pool.
type Options struct {
	// MaxConns bounds open connections; 0 means 10.
	MaxConns int
	// Logger receives nothing on the hot path; nil discards.
	Logger *slog.Logger
	// StatementTimeout is every session's statement_timeout (sent in
	// milliseconds); 0 keeps the server's default. See
	// StatementTimeoutDefault.
	StatementTimeout time.Duration
	// LockTimeout is every session's lock_timeout: a statement waiting
	// longer for a lock fails with SQLSTATE 55P03 (IsLockTimeout); 0 keeps
	// the server's default. See LockTimeoutDefault.
	LockTimeout time.Duration
	// IdleInTxTimeout is every session's
	// idle_in_transaction_session_timeout: PostgreSQL ends a session idle
	// inside a transaction this long; 0 keeps the server's default. See
	// IdleInTxTimeoutDefault and ValidateSession.
	IdleInTxTimeout time.Duration
	// OneShot says the pool serves one short command (the CLI): the
	// trigger path's statements are sent unprepared (pgx's
	// QueryExecModeExec: one round trip on a new connection, where a
	// prepared statement takes two) and Open does not ping (the first
	// query, CheckSchema's, finds a database that does not answer).
	OneShot bool
	// MidExpansion, when set, is called inside a scheduler pass's
	// transaction once it inserted the elements of a for_each task and
	// before it commits: a test's (or a failpoint's) way to die holding an
	// uncommitted expansion.
	MidExpansion func()
	// MidWaitArm, when set, is called inside a scheduler pass's
	// transaction once it made waits RUNNING and matched them against the
	// events kept, before it commits: a test's way to hold a pass there
	// while an event is sent (qLockEventKey).
	MidWaitArm func()
	// MidChildStart, when set, is called inside a scheduler pass's
	// transaction once it triggered a workflow task's child run and named
	// the parent on it, before it commits: a test's (or a failpoint's) way
	// to die holding an uncommitted child start.
	MidChildStart func()
	// MidAdmit, when set, is called inside an admission round's
	// transaction (Admit) once it locked its keys and admitted, before it
	// commits: a test's way to hold an admission there while another
	// admitter of the same key runs (qLockFlowKeys).
	MidAdmit func()
	// MaxChildDepth bounds how deep child runs nest (a workflow task's
	// child of a run at depth MaxChildDepth is refused: the task is DEAD);
	// 0 means MaxChildDepthDefault. The scheduler's --max-child-depth.
	MaxChildDepth int
}

// Store is a handle on FlowForge's database. It is safe for concurrent use.
type Store struct {
	db  *sqlx.DB
	log *slog.Logger
	// defs caches the workflow definitions Trigger used (see definition).
	defs *defCache
	// oneShot: see Options.OneShot.
	oneShot bool
	// installation caches Installation's answer (it never changes).
	installation installationCache
	// midExpansion: see Options.MidExpansion.
	midExpansion func()
	// midWaitArm: see Options.MidWaitArm.
	midWaitArm func()
	// midChildStart: see Options.MidChildStart.
	midChildStart func()
	// midAdmit: see Options.MidAdmit.
	midAdmit func()
	// admitBatch is AdmitBatchMax, or a test's smaller batch (0: the
	// constant).
	admitBatch int
	// maxDepth: see Options.MaxChildDepth.
	maxDepth int
}

// Open connects to url (a postgres:// URL or key=value DSN) and pings it,
// bounded by ctx (a OneShot store is not pinged: its first query connects).
// Every session of the pool carries opt's session bounds
// (StatementTimeout, LockTimeout, IdleInTxTimeout). It does not check the
// schema: see CheckSchema. Errors: a url that does not parse, a database
// that does not answer.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", RedactURL(url), err)
	}
	for k, v := range opt.runtimeParams() {
		cfg.RuntimeParams[k] = v
	}
	db := sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	n := opt.MaxConns
	if n <= 0 {
		n = 10
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if !opt.OneShot {
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("connect to database %s: %w", RedactURL(url), err)
		}
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{db: db, log: log, defs: newDefCache(), oneShot: opt.OneShot, midExpansion: opt.MidExpansion,
		midWaitArm: opt.MidWaitArm, midChildStart: opt.MidChildStart, midAdmit: opt.MidAdmit, maxDepth: opt.MaxChildDepth}, nil
}

// FromDB returns a Store on db, a database/sql pool of the caller's whose
// driver is pgx's (sql.Open("pgx", url), stdlib.OpenDB,
// stdlib.OpenDBFromPool; the name "pgx" comes with package
// github.com/jackc/pgx/v5/stdlib). It does not ping db or change its
// settings (pool size, session parameters: the caller's), and Close
// closes db. log receives nothing on the hot path; nil discards. Errors:
// a db of another driver, whose encoding of a trigger's array arguments
// would differ.
func FromDB(db *sql.DB, log *slog.Logger) (*Store, error) {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, fmt.Errorf("store on a database/sql pool: its driver is %T, want pgx's (*stdlib.Driver: sql.Open(\"pgx\", url))", db.Driver())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{db: sqlx.NewDb(db, "pgx"), log: log, defs: newDefCache()}, nil
}

// FromPool returns a Store on pool, a pgx pool of the caller's, through a
// database/sql handle of its own over it (stdlib.OpenDBFromPool): the
// Store's connections are the pool's. Close releases that handle, not
// pool, which stays the caller's to close (after the Store's). log: as
// for FromDB.
func FromPool(pool *pgxpool.Pool, log *slog.Logger) *Store {
	s, _ := FromDB(stdlib.OpenDBFromPool(pool), log) // its driver is pgx's
	return s
}

// args prepends, for a OneShot store, pgx's unprepared mode to a
// statement's arguments (every parameter of such a statement must carry an
// explicit cast: the server infers its type).
func (s *Store) args(args ...any) []any {
	if s.oneShot {
		return append([]any{pgx.QueryExecModeExec}, args...)
	}
	return args
}

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers, bounded by ctx.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Now returns the database's clock: FlowForge's only clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.db.QueryRowContext(ctx, `SELECT now()`).Scan(&t)
	return t, err
}

var (
	dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	// urlPassword is a URL's user:password@ read without net/url, for a
	// URL that net/url refuses (a port that is not a number): everything
	// up to the last @ before the path is user info.
	urlPassword = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:)[^/?#]*@`)
)

// RedactURL hides the password of a connection string for messages: a
// postgres:// URL's user info (also in a URL net/url cannot parse), or a
// key=value DSN's password=.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		raw = urlPassword.ReplaceAllString(raw, "${1}xxxxx@")
		return dsnPassword.ReplaceAllString(raw, "${1}xxxxx")
	}
	return u.Redacted()
}

// CheckURL reports whether raw parses as a PostgreSQL connection string (a
// postgres:// URL or a keyword/value string), without connecting. The
// error, when it does not, is the driver's reason with the password
// masked ("xxxxx"): the driver redacts its URL, and a password it quotes
// in the reason (a keyword/value string it could not split) is masked too.
// Commands report it as bad input; a daemon would otherwise retry a URL
// that can never connect for ever.
func CheckURL(raw string) error {
	_, err := pgconn.ParseConfig(raw)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if m := passwordKV.FindStringSubmatch(raw); m != nil && m[1] != "" {
		msg = strings.ReplaceAll(msg, m[1], "xxxxx")
	}
	return errors.New(msg)
}

// passwordKV finds the password of a keyword/value connection string.
var passwordKV = regexp.MustCompile(`password\s*=\s*'?([^'\s]+)`)

// pgCode returns the SQLSTATE of a PostgreSQL error, "" for others.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsLockTimeout reports whether err is PostgreSQL's lock_not_available
// (SQLSTATE 55P03): a statement gave up waiting for a lock after
// lock_timeout.
func IsLockTimeout(err error) bool { return pgCode(err) == "55P03" }

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return unanswered("commit", err)
	}
	return nil
}

// unanswered wraps err, the error of a COMMIT or of a statement that
// commits on its own (what names it), with ErrCommitOutcomeUnknown when the
// server gave no answer (no SQLSTATE: the connection failed or the context
// ended after it was sent), so the write may have been applied. An error
// the server sent is a rollback and is only wrapped with what.
func unanswered(what string, err error) error {
	if pgCode(err) == "" {
		// No answer from the server: the commit may have been applied.
		return fmt.Errorf("%s: %w: %w", what, ErrCommitOutcomeUnknown, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ErrCommitOutcomeUnknown is wrapped by every store write whose COMMIT got
// no answer from the server (the connection failed or the context ended
// after the COMMIT was sent): the transaction may or may not have been
// committed, and only a read-back can tell. A COMMIT the server refused
// (an error with an SQLSTATE) is a rollback and does not wrap it. Callers
// must not report such a write as "nothing changed".
var ErrCommitOutcomeUnknown = errors.New("the database did not answer the COMMIT; the change may or may not have been made")

// mustEdge refuses, before any SQL runs, a transition the state machine does
// not have. Each store method that moves a task names its edges here.
func mustEdge(from core.TaskState, to ...core.TaskState) error {
	for _, t := range to {
		if err := core.CheckTransition(from, t); err != nil {
			return err
		}
	}
	return nil
}
