package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Installation is the one row of the installation table (migration 11):
// the id of the FlowForge installation this database holds, written into
// every dispatch (core.Dispatch.Installation) so that a worker can tell its
// own installation's messages from another's on a shared queue.
type Installation struct {
	ID        uuid.UUID `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// qInstallation reads the installation row.
const qInstallation = `SELECT id, created_at FROM installation`

// installationSQL is the installation id as dispatchPayloadSQL writes it:
// an uncorrelated scalar subquery (an InitPlan, evaluated once per
// statement; the table's one_row key keeps it to one row). NULL when the
// row is missing, which a worker reads as a message of no installation.
const installationSQL = `(SELECT id FROM installation)`

// installationCache holds a Store's installation once read.
type installationCache struct {
	mu  sync.Mutex
	got *Installation
}

// Installation returns this database's installation, read once per Store
// and then cached (the row never changes). Errors: ErrNotFound when the
// table holds no row (deleted by hand: `ffctl migrate` does not recreate
// it), ErrSchemaOutdated wrapped when the table does not exist (run `ffctl
// migrate`), and the database's error otherwise; errors are not cached.
func (s *Store) Installation(ctx context.Context) (Installation, error) {
	c := &s.installation
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got != nil {
		return *c.got, nil
	}
	var in Installation
	err := s.db.QueryRowContext(ctx, qInstallation, s.args()...).Scan(&in.ID, &in.CreatedAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Installation{}, fmt.Errorf("read installation: %w: the installation table is empty", ErrNotFound)
	case pgCode(err) == "42P01": // undefined_table
		return Installation{}, fmt.Errorf("read installation: %w: run `ffctl migrate`", ErrSchemaOutdated)
	case err != nil:
		return Installation{}, fmt.Errorf("read installation: %w", err)
	}
	c.got = &in
	return in, nil
}

// Location is where a database URL points, for saying which installation a
// command talks to: never the password.
type Location struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Database string `json:"database"`
	User     string `json:"user"`
	// SearchPath is the URL's search_path, when it sets one: two
	// installations can share a database in two schemas.
	SearchPath string `json:"search_path,omitempty"`
	// Fallbacks are the other servers a multi-host URL names
	// (postgres://a:5432,b:5433/db, host=a,b port=5432,5433), as host:port
	// in the order the driver tries them when the first does not answer;
	// nil for one host. A server is named once (sslmode=prefer tries each
	// one twice: TLS, then without).
	Fallbacks []string `json:"fallbacks,omitempty"`
}

// String is host:port/database, every fallback after the first server
// (host:port,host:port/database, as a multi-host URL writes them), with
// the search path when one is set.
func (l Location) String() string {
	s := net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))
	for _, f := range l.Fallbacks {
		s += "," + f
	}
	s += "/" + l.Database
	if l.SearchPath != "" {
		s += " (search_path " + l.SearchPath + ")"
	}
	return s
}

// LocationOf parses url (a postgres:// URL or key=value DSN) as Open would,
// the PG* environment and libpq's defaults included, and returns where it
// points (a URL naming no database points at the one named like its
// user, as PostgreSQL's default is). Errors: a url that does not parse (pgx's error, which shows the
// url with its password redacted).
func LocationOf(url string) (Location, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return Location{}, fmt.Errorf("parse database url: %w", err)
	}
	db := cfg.Database
	if db == "" {
		db = cfg.User // PostgreSQL's default: the database named like the user
	}
	loc := Location{Host: cfg.Host, Port: cfg.Port, Database: db, User: cfg.User,
		SearchPath: cfg.RuntimeParams["search_path"]}
	first := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	for _, f := range cfg.Fallbacks {
		if a := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); a != first && !slices.Contains(loc.Fallbacks, a) {
			loc.Fallbacks = append(loc.Fallbacks, a)
		}
	}
	return loc, nil
}
