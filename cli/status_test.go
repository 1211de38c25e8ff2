package cli_test

import (
	"bytes"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// runFFCTL runs ffctl in-process with args as they are (no --database-url
// added).
func runFFCTL(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(t.Context(), append([]string{"ffctl"}, args...), nil, strings.NewReader(""), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// statusJSON is `ffctl status -o json` as a script reads it.
type statusJSON struct {
	Installation *struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	} `json:"installation"`
	Database struct {
		Host       string   `json:"host"`
		Port       int      `json:"port"`
		Database   string   `json:"database"`
		User       string   `json:"user"`
		SearchPath string   `json:"search_path"`
		Fallbacks  []string `json:"fallbacks"`
		Source     string   `json:"source"`
	} `json:"database"`
	Broker struct {
		Nodes           []string `json:"nodes"`
		User            string   `json:"user"`
		Vhost           string   `json:"vhost"`
		Queue           string   `json:"queue"`
		DeadLetterQueue string   `json:"dead_letter_queue"`
	} `json:"broker"`
	Error string `json:"error"`
}

// TestStatusNamesTheInstallationAndNeverAPassword: `ffctl status` shows
// the database's installation id, where the database is, the broker's
// nodes and vhost and the queue, in text and in JSON, and no password of
// either URL.
func TestStatusNamesTheInstallationAndNeverAPassword(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	in, err := h.s.Installation(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("postgres", "s3cret-db") // the test server trusts: the password is ignored
	dbURL := u.String()
	loc, err := store.LocationOf(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--database-url", dbURL, "--amqp-url", "amqp://app:s3cret-mq@rabbit-1:5999/prod, amqp://app:s3cret-mq@rabbit-2/prod", "--queue", "team-a.dispatch", "status"}
	r := runFFCTL(t, args...)
	if r.code != 0 {
		t.Fatalf("status: %s", r)
	}
	want := "installation: " + in.ID.String() + " (created " + in.CreatedAt.UTC().Format(time.RFC3339) + ")\n" +
		"database:     postgres://postgres@" + loc.String() + " (from --database-url)\n" +
		"broker:       amqp://app@rabbit-1:5999,rabbit-2:5672, vhost prod\n" +
		"queue:        team-a.dispatch (dead letters: team-a.dispatch.dead)\n"
	if r.stdout != want {
		t.Fatalf("status:\n%s\nwant:\n%s", r.stdout, want)
	}
	j := runFFCTL(t, append(args, "-o", "json")...)
	if j.code != 0 {
		t.Fatalf("status -o json: %s", j)
	}
	st := decode[statusJSON](t, j.stdout)
	if st.Installation == nil || st.Installation.ID != in.ID.String() || st.Error != "" {
		t.Fatalf("installation %+v (error %q), want %s", st.Installation, st.Error, in.ID)
	}
	d := st.Database
	if d.Host != loc.Host || d.Port != int(loc.Port) || d.Database != loc.Database || d.User != "postgres" || d.SearchPath != loc.SearchPath || d.Source != "--database-url" {
		t.Fatalf("database %+v, want %+v from --database-url", d, loc)
	}
	b := st.Broker
	if strings.Join(b.Nodes, " ") != "rabbit-1:5999 rabbit-2:5672" || b.User != "app" || b.Vhost != "prod" || b.Queue != "team-a.dispatch" || b.DeadLetterQueue != "team-a.dispatch.dead" {
		t.Fatalf("broker %+v", b)
	}
	for _, out := range []result{r, j} {
		if strings.Contains(out.stdout+out.stderr, "s3cret") {
			t.Fatalf("status shows a password:\n%s", out)
		}
	}
}

// TestStatusSaysWhereTheDatabaseURLCameFrom: unset, the default is named as
// such; from the environment, FLOWFORGE_DATABASE_URL; set but empty, that
// libpq's defaults apply. Not parallel: it sets the environment ffctl
// reads.
func TestStatusSaysWhereTheDatabaseURLCameFrom(t *testing.T) {
	h := newHarness(t)
	t.Setenv("FLOWFORGE_DATABASE_URL", "")
	if err := os.Unsetenv("FLOWFORGE_DATABASE_URL"); err != nil {
		t.Fatal(err)
	}
	// The default database may or may not exist on this machine: the
	// line is written either way, and the exit says whether it answered.
	r := runFFCTL(t, "status")
	const def = "database:     postgres://postgres@127.0.0.1:5432/flowforge (default: FLOWFORGE_DATABASE_URL is unset)\n"
	if !strings.Contains(r.stdout, def) || (r.code != 0 && (r.code != 1 || !strings.HasPrefix(r.stderr, "ffctl: "))) {
		t.Fatalf("status with FLOWFORGE_DATABASE_URL unset: %s\nwant the line %q and exit 0, or 1 with an error", r, def)
	}
	if j := runFFCTL(t, "status", "-o", "json"); !strings.Contains(j.stdout, `"source": "default"`) {
		t.Fatalf("status -o json with FLOWFORGE_DATABASE_URL unset: %s", j)
	}

	t.Setenv("FLOWFORGE_DATABASE_URL", h.url)
	r = runFFCTL(t, "status")
	if r.code != 0 || !strings.Contains(r.stdout, " (from FLOWFORGE_DATABASE_URL)\n") {
		t.Fatalf("status with FLOWFORGE_DATABASE_URL set: %s", r)
	}
	if r := runFFCTL(t, "--database-url", h.url, "status"); r.code != 0 || !strings.Contains(r.stdout, " (from FLOWFORGE_DATABASE_URL)\n") {
		t.Fatalf("status with the flag equal to the environment: %s", r)
	}

	t.Setenv("FLOWFORGE_DATABASE_URL", "")
	r = runFFCTL(t, "status")
	if !strings.Contains(r.stdout, "(FLOWFORGE_DATABASE_URL is set but empty: libpq's defaults and the PG* environment apply)\n") {
		t.Fatalf("status with FLOWFORGE_DATABASE_URL empty: %s", r)
	}
}

// TestStatusOfADatabaseThatDoesNotAnswer: the configured lines are still
// written, the installation is unknown, JSON says why, and the exit is 1.
func TestStatusOfADatabaseThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	refused := storetest.RefusedURL(t)
	r := runFFCTL(t, "--database-url", refused, "status")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "installation: unknown (the database could not be read: see the error below)\ndatabase:     postgres://postgres@127.0.0.1:") ||
		!strings.HasPrefix(r.stderr, "ffctl: connect to database") {
		t.Fatalf("status of a refused database: %s", r)
	}
	j := runFFCTL(t, "--database-url", refused, "status", "-o", "json")
	st := decode[statusJSON](t, j.stdout)
	if j.code != 1 || st.Installation != nil || !strings.Contains(st.Error, "connect to database") {
		t.Fatalf("status -o json of a refused database: %s", j)
	}
}

// TestStatusBadInput: usage errors, exit 2, nothing connected to.
func TestStatusBadInput(t *testing.T) {
	t.Parallel()
	refused := storetest.RefusedURL(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"an argument", []string{"--database-url", refused, "status", "x"}, "ffctl: status takes no arguments"},
		{"an unknown format", []string{"--database-url", refused, "status", "-o", "yaml"}, `ffctl: -o "yaml": want table or json`},
		{"a database url that does not parse", []string{"--database-url", "postgres://u:s3cret@h:port/x", "status"}, "ffctl: --database-url: parse database url:"},
		{"a broker url that does not parse", []string{"--database-url", refused, "--amqp-url", "http://u:s3cret@h/", "status"}, "ffctl: --amqp-url:"},
		{"no broker url", []string{"--database-url", refused, "--amqp-url", " , ", "status"}, "ffctl: --amqp-url: no broker url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runFFCTL(t, c.args...)
			if r.code != 2 || !strings.HasPrefix(r.stderr, c.want) || r.stdout != "" || strings.Contains(r.stderr, "s3cret") {
				t.Fatalf("%s\nwant exit 2, nothing on stdout, stderr starting %q and no password", r, c.want)
			}
		})
	}
}

// TestStatusNamesEveryServerOfAMultiHostURL (trial leftover): a URL that
// names two servers is shown with both, in the driver's order, and the
// JSON has the second in fallbacks (status showed only the first, as if
// the URL named one).
func TestStatusNamesEveryServerOfAMultiHostURL(t *testing.T) {
	t.Parallel()
	first, second := refusedAddr(t), refusedAddr(t)
	dbURL := "postgres://app:s3cret@" + first + "," + second + "/ff?connect_timeout=1"
	r := runFFCTL(t, "--database-url", dbURL, "status")
	want := "database:     postgres://app@" + first + "," + second + "/ff (from --database-url)\n"
	if !strings.Contains(r.stdout, want) || strings.Contains(r.stdout+r.stderr, "s3cret") {
		t.Fatalf("%s\nwant a line %q and no password", r, want)
	}
	j := runFFCTL(t, "--database-url", dbURL, "status", "-o", "json")
	d := decode[statusJSON](t, j.stdout).Database
	if d.Host+":"+strconv.Itoa(d.Port) != first || strings.Join(d.Fallbacks, " ") != second {
		t.Fatalf("database %+v, want %s with the fallback %s", d, first, second)
	}
}

// refusedAddr is a loopback host:port nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(storetest.RefusedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestABadOutputFormatNamesWhereItCameFrom (trial leftover): a bad
// FLOWFORGE_OUTPUT is named as the variable, not as -o, which the operator
// never typed; a bad -o on the command line is still named -o. Not
// parallel: it sets the process's environment, which urfave/cli reads.
func TestABadOutputFormatNamesWhereItCameFrom(t *testing.T) {
	refused := storetest.RefusedURL(t)
	t.Setenv("FLOWFORGE_OUTPUT", "") // restored at the end
	// Unset, an empty -o is -o's (the variable's empty value was taken
	// for the variable).
	if err := os.Unsetenv("FLOWFORGE_OUTPUT"); err != nil {
		t.Fatal(err)
	}
	if r := runFFCTL(t, "--database-url", refused, "status", "-o", ""); r.code != 2 || !strings.HasPrefix(r.stderr, `ffctl: -o "": want table or json`) {
		t.Errorf("-o '' with FLOWFORGE_OUTPUT unset: %s\nwant exit 2 naming -o", r)
	}
	t.Setenv("FLOWFORGE_OUTPUT", "yaml")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"from the environment", []string{"--database-url", refused, "status"}, `ffctl: FLOWFORGE_OUTPUT "yaml": want table or json`},
		{"on the command line over it", []string{"--database-url", refused, "status", "-o", "xml"}, `ffctl: -o "xml": want table or json`},
	}
	for _, c := range cases {
		r := runFFCTL(t, c.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%s: %s\nwant exit 2 and stderr starting %q", c.name, r, c.want)
		}
	}
}

// TestAnEmptyDatabaseURLFlagIsNamedAsTheFlag (trial): --database-url ”
// with FLOWFORGE_DATABASE_URL unset is the flag's, not the variable's
// (status said the variable was set but empty). Not parallel: it unsets
// the process's variable.
func TestAnEmptyDatabaseURLFlagIsNamedAsTheFlag(t *testing.T) {
	t.Setenv("FLOWFORGE_DATABASE_URL", "") // restored at the end
	if err := os.Unsetenv("FLOWFORGE_DATABASE_URL"); err != nil {
		t.Fatal(err)
	}
	r := runFFCTL(t, "--database-url", "", "--amqp-url", "amqp://127.0.0.1:1/", "status", "-o", "json")
	if d := decode[statusJSON](t, r.stdout).Database; d.Source != "--database-url" {
		t.Fatalf("database %+v (%s), want it from --database-url", d, r)
	}
}
