package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/tui"
)

// Where the database URL came from (statusDatabase.Source).
const (
	sourceDefault = "default"
	sourceFlag    = "--database-url"
	sourceEnv     = "FLOWFORGE_DATABASE_URL"
)

// statusInfo is `ffctl status -o json`: which installation this ffctl
// talks to. Installation is null (and Error says why) when the database
// could not be read.
type statusInfo struct {
	Installation *store.Installation `json:"installation"`
	Database     statusDatabase      `json:"database"`
	Broker       statusBroker        `json:"broker"`
	Error        string              `json:"error,omitempty"`
}

// statusDatabase is where the database URL points (never its password)
// and where the URL came from: "default" (FLOWFORGE_DATABASE_URL unset and
// no --database-url), "--database-url" or "FLOWFORGE_DATABASE_URL".
type statusDatabase struct {
	store.Location
	Source string `json:"source"`
	// EmptyURL: the URL was set but empty, so libpq's defaults and the
	// PG* environment decide where ffctl connects.
	EmptyURL bool `json:"empty_url,omitempty"`
}

// statusBroker is where the broker URLs point (never a password), the
// vhost of the first, and the dispatch queue with its dead-letter queue.
type statusBroker struct {
	Nodes           []string `json:"nodes"`
	User            string   `json:"user"`
	Vhost           string   `json:"vhost"`
	Queue           string   `json:"queue"`
	DeadLetterQueue string   `json:"dead_letter_queue"`
}

func statusCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "which installation this ffctl talks to: its id, the database, the broker's vhost and the dispatch queue",
		UsageText: "ffctl status [-o json]\n\n" +
			"The installation id is created by `ffctl migrate`, one per database, and travels in every\n" +
			"dispatch: a worker sends another installation's dispatch back to the queue unclaimed (two\n" +
			"installations sharing a queue is a misconfiguration; see docs/operating.md). The database\n" +
			"line says when FLOWFORGE_DATABASE_URL is unset and the default is used. No password is shown.\n\n" +
			"Example:\n  ffctl status\n  ffctl status -o json | jq -r .installation.id",
		Flags:  []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error { return statusAction(c, env) },
	}
}

func statusAction(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("status takes no arguments")
	}
	info, err := configuredInstallation(c, env)
	if err != nil {
		return err
	}
	in, readErr := query(c, func(ctx context.Context, s *store.Store) (store.Installation, error) { return s.Installation(ctx) })
	if readErr == nil {
		info.Installation = &in
	} else {
		info.Error = readErr.Error()
	}
	if format == "json" {
		if err := writeJSON(env.Stdout, info); err != nil {
			return err
		}
	} else {
		writeStatus(env.Stdout, info)
	}
	return readErr
}

// configuredInstallation is what the global flags say of the installation,
// without connecting: the database and the broker. A URL that does not
// parse is a usage error.
func configuredInstallation(c *cli.Context, env *Env) (statusInfo, error) {
	dbURL := databaseURL(c)
	loc, err := store.LocationOf(dbURL)
	if err != nil {
		return statusInfo{}, usageError("--database-url: %v", err)
	}
	info := statusInfo{Database: statusDatabase{Location: loc, Source: sourceDefault, EmptyURL: dbURL == ""}}
	switch {
	case !c.IsSet("database-url"):
	case envDatabaseURL(env, dbURL):
		info.Database.Source = sourceEnv
	default:
		info.Database.Source = sourceFlag
	}
	bc := brokerConfig(c, nil)
	if len(bc.URLs) == 0 {
		return statusInfo{}, usageError("--amqp-url: no broker url")
	}
	info.Broker = statusBroker{Queue: bc.Queue, DeadLetterQueue: broker.DeadLetterQueue(bc.Queue)}
	for i, u := range bc.URLs {
		bl, err := broker.LocationOf(u)
		if err != nil {
			return statusInfo{}, usageError("--amqp-url: %v", err)
		}
		if i == 0 {
			info.Broker.User, info.Broker.Vhost = bl.User, bl.Vhost
		}
		info.Broker.Nodes = append(info.Broker.Nodes, bl.Address())
	}
	return info, nil
}

// envDatabaseURL says that dbURL, given (the flag or the variable), came
// from FLOWFORGE_DATABASE_URL: the variable is set to it. An empty
// --database-url with the variable unset came from the flag.
func envDatabaseURL(env *Env, dbURL string) bool {
	v, set := env.lookupEnv(sourceEnv)
	return set && v == dbURL
}

// line is the database as `ffctl status` shows it:
// postgres://USER@HOST:PORT/NAME and where the URL came from.
func (d statusDatabase) line() string {
	s := "postgres://" + d.User + "@" + d.Location.String()
	switch {
	case d.Source == sourceDefault:
		return s + " (default: FLOWFORGE_DATABASE_URL is unset)"
	case d.EmptyURL:
		return s + " (" + d.Source + " is set but empty: libpq's defaults and the PG* environment apply)"
	default:
		return s + " (from " + d.Source + ")"
	}
}

// writeStatus writes info as `ffctl status` shows it.
func writeStatus(w io.Writer, info statusInfo) {
	inst := "unknown (the database could not be read: see the error below)"
	if in := info.Installation; in != nil {
		inst = in.ID.String() + " (created " + in.CreatedAt.UTC().Format(time.RFC3339) + ")"
	}
	b := info.Broker
	lines := [][2]string{
		{"installation", inst},
		{"database", info.Database.line()},
		{"broker", "amqp://" + b.User + "@" + strings.Join(b.Nodes, ",") + ", vhost " + b.Vhost},
		{"queue", b.Queue + " (dead letters: " + b.DeadLetterQueue + ")"},
	}
	for _, l := range lines {
		fmt.Fprintf(w, "%-13s %s\n", l[0]+":", core.TerminalText(l[1]))
	}
}

// dashboardInstallation is what the dashboard's header shows of info.
func dashboardInstallation(info statusInfo, in store.Installation) tui.Installation {
	return tui.Installation{
		ID:              in.ID,
		Database:        info.Database.Location.String(),
		DefaultDatabase: info.Database.Source == sourceDefault,
		Vhost:           info.Broker.Vhost,
		Queue:           info.Broker.Queue,
	}
}
