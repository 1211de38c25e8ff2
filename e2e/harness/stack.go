package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestAMQPURLDefault is used when FLOWFORGE_TEST_AMQP_URL is unset.
const TestAMQPURLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// TestAMQPURL returns the broker tests use when they do not start their own.
func TestAMQPURL() string {
	if u := os.Getenv("FLOWFORGE_TEST_AMQP_URL"); u != "" {
		return u
	}
	return TestAMQPURLDefault
}

// StackOptions configures NewStack. Zero values pick the shared services.
type StackOptions struct {
	// DatabaseURL of an existing (empty or migrated) database; empty means
	// a throwaway database from storetest on the shared server.
	DatabaseURL string
	// AMQPURLs of the broker (several for a cluster); empty means
	// TestAMQPURL().
	AMQPURLs []string
	// Bin is the ffctl binary the stack runs (and migrates with); empty
	// means BuildFFCTL. A rolling-upgrade test passes an older build.
	Bin string
}

// Stack is one isolated FlowForge installation for a test: its own
// database, its own dispatch queue name, and the real ffctl binary. It
// starts no daemon by itself: see Daemon.
type Stack struct {
	Bin         string
	DatabaseURL string
	AMQPURLs    []string
	Queue       string
	Store       *store.Store
	// db is the harness's own small pool for its waits (WaitRuns).
	db *sql.DB
}

// NewStack builds ffctl (unless opt.Bin names one), prepares and migrates
// the database (with that binary's `ffctl migrate`), picks a unique queue
// name (deleted with its dead-letter queue in t.Cleanup) and opens a store
// for assertions.
func NewStack(t testing.TB, opt StackOptions) *Stack {
	t.Helper()
	s := &Stack{Bin: opt.Bin, DatabaseURL: opt.DatabaseURL, AMQPURLs: opt.AMQPURLs}
	if s.Bin == "" {
		s.Bin = BuildFFCTL(t)
	}
	if s.DatabaseURL == "" {
		s.DatabaseURL = storetest.NewDatabase(t)
	}
	if len(s.AMQPURLs) == 0 {
		s.AMQPURLs = []string{TestAMQPURL()}
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	s.Queue = "fftest." + hex.EncodeToString(b)
	t.Cleanup(func() { s.deleteQueues() })
	s.MustCLI(t, "migrate")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, s.DatabaseURL, store.Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	s.Store = st
	s.db = s.DB(t)
	return s
}

// DB opens a small database/sql pool on the stack's database for
// assertions and fault injection (locks) that the CLI does not expose; it is
// closed in t.Cleanup.
func (s *Stack) DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

// deleteQueues deletes the stack's queues and exchanges (the shared and
// dead-letter queues, the route and unrouted exchanges and the queue of
// each handler of KnownHandlers) from the first broker that answers.
func (s *Stack) deleteQueues() {
	for _, u := range s.AMQPURLs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := broker.DeleteTopology(ctx, broker.Config{URLs: []string{u}, Queue: s.Queue, Handlers: KnownHandlers(), DialTimeout: 3 * time.Second})
		cancel()
		if err == nil {
			return
		}
	}
}

// KnownHandlers returns the handlers the e2e tests' workers register (the
// built-ins and testbin's): a worker declares a queue for each (routing by
// handler), which the stack's cleanup deletes.
func KnownHandlers() []string {
	return []string{"noop", "sleep", "fail", "http", "shell", "boom", "special"}
}

// Env returns the environment that points ffctl at this stack (health
// servers disabled unless a test passes --health-addr).
func (s *Stack) Env() []string {
	return []string{
		"FLOWFORGE_DATABASE_URL=" + s.DatabaseURL,
		"FLOWFORGE_AMQP_URL=" + strings.Join(s.AMQPURLs, ","),
		"FLOWFORGE_QUEUE=" + s.Queue,
		"FLOWFORGE_HEALTH_ADDR=",
		"FLOWFORGE_LOG_LEVEL=debug",
	}
}

// Daemon starts `ffctl daemon ROLE args...` as a subprocess named name.
func (s *Stack) Daemon(t testing.TB, name, role string, args ...string) *Process {
	t.Helper()
	return s.DaemonEnv(t, name, role, nil, args...)
}

// DaemonEnv is Daemon with env ("K=V" entries) added to the stack's
// environment, overriding it: a database URL through a proxy, failpoints.
func (s *Stack) DaemonEnv(t testing.TB, name, role string, env []string, args ...string) *Process {
	t.Helper()
	return StartProcess(t, name, s.Bin, append([]string{"daemon", role}, args...), append(s.Env(), env...))
}

// DaemonIn is DaemonEnv run inside the network namespace ns (`ip netns
// exec`): env must point the daemon's URLs at servers it reaches there
// (ns.URL, or a proxy from StartProxyOn).
func (s *Stack) DaemonIn(t testing.TB, ns *Netns, name, role string, env []string, args ...string) *Process {
	t.Helper()
	bin, argv := ns.Command(s.Bin, append([]string{"daemon", role}, args...)...)
	return StartProcess(t, name, bin, argv, append(s.Env(), env...))
}

// ControlPlane starts a scheduler (`ffctl daemon scheduler
// schedulerArgs...`, named "scheduler") and a publisher (named
// "publisher") and returns the scheduler.
func (s *Stack) ControlPlane(t testing.TB, schedulerArgs ...string) *Process {
	t.Helper()
	sched := s.Daemon(t, "scheduler", "scheduler", schedulerArgs...)
	s.Daemon(t, "publisher", "publisher")
	return sched
}

// CLI runs ffctl with args against this stack and returns its stdout,
// stderr and exit code (bounded by one minute).
func (s *Stack) CLI(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return s.CLIWithInput(t, "", args...)
}

// CLIWithInput is CLI with standard input.
func (s *Stack) CLIWithInput(t testing.TB, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bin, args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("ffctl %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// MustCLI runs ffctl and fails the test unless it exits 0; it returns
// stdout.
func (s *Stack) MustCLI(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, code := s.CLI(t, args...)
	if code != 0 {
		t.Fatalf("ffctl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// Apply applies a workflow file given as YAML text.
func (s *Stack) Apply(t testing.TB, yaml string) {
	t.Helper()
	out, errOut, code := s.CLIWithInput(t, yaml, "workflow", "apply", "-f", "-")
	if code != 0 {
		t.Fatalf("workflow apply: exit %d\n%s%s", code, out, errOut)
	}
}

// ApplyUnservedHandlers is Apply with --allow-unknown-handler: it stores a
// workflow naming a handler none of the live workers registers (which
// `workflow apply` otherwise refuses), for the tests of what such a task
// does.
func (s *Stack) ApplyUnservedHandlers(t testing.TB, yaml string) {
	t.Helper()
	out, errOut, code := s.CLIWithInput(t, yaml, "workflow", "apply", "-f", "-", "--allow-unknown-handler")
	if code != 0 {
		t.Fatalf("workflow apply --allow-unknown-handler: exit %d\n%s%s", code, out, errOut)
	}
}

// Trigger starts a run of workflow with params ("k=v") and returns its id.
func (s *Stack) Trigger(t testing.TB, workflow string, params ...string) string {
	t.Helper()
	args := []string{"run", "trigger", workflow}
	for _, p := range params {
		args = append(args, "--param", p)
	}
	return strings.TrimSpace(s.MustCLI(t, args...))
}

// RunJSON is the subset of `ffctl run show -o json` tests assert on.
type RunJSON struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Tasks []struct {
		ID          string          `json:"id"`
		Name        string          `json:"name"`
		State       string          `json:"state"`
		Attempt     int             `json:"attempt"`
		MaxAttempts int             `json:"max_attempts"`
		Result      json.RawMessage `json:"result"`
		Error       *string         `json:"error"`
	} `json:"tasks"`
}

// Task returns the named task of the run (failing the test if absent).
func (r RunJSON) Task(t testing.TB, name string) (id, state string, attempt int) {
	t.Helper()
	for _, x := range r.Tasks {
		if x.Name == name {
			return x.ID, x.State, x.Attempt
		}
	}
	t.Fatalf("run %s has no task %q", r.ID, name)
	return "", "", 0
}

// ShowRun reads a run through `ffctl run show -o json`.
func (s *Stack) ShowRun(t testing.TB, id string) RunJSON {
	t.Helper()
	var r RunJSON
	out := s.MustCLI(t, "run", "show", id, "-o", "json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decode run show: %v\n%s", err, out)
	}
	return r
}

// WaitRunTerminal polls (through the store) until the run's state is
// terminal and the run settled, or fails the test after timeout; it returns
// the run as `ffctl run show -o json` reports it.
func (s *Stack) WaitRunTerminal(t testing.TB, id string, timeout time.Duration) RunJSON {
	t.Helper()
	Eventually(t, timeout, "run "+id+" to finish", func() (bool, error) {
		r := s.ShowRun(t, id)
		return core.RunState(r.State).Terminal(), nil
	})
	return s.ShowRun(t, id)
}

// WithBin returns a view of the stack whose daemons and CLI calls run bin
// (for example BuildTestBin's) instead of s.Bin: same database, queue and
// store; the cleanups stay with s.
func (s *Stack) WithBin(bin string) *Stack {
	v := *s
	v.Bin = bin
	return &v
}

// HealthDaemon is a daemon subprocess with its health server.
type HealthDaemon struct {
	*Process
	// Health is the host:port of its /health/* and /metrics (see
	// MetricsText, Scrape).
	Health string
}

// DaemonWithHealth starts `ffctl daemon ROLE --health-addr ADDR args...`
// as Daemon does, ADDR a free 127.0.0.1 port, and waits up to 20 s until
// its /health/live answers 200; it fails the test if the process exits
// first or the server never answers.
func (s *Stack) DaemonWithHealth(t testing.TB, name, role string, args ...string) *HealthDaemon {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	p := s.Daemon(t, name, role, append([]string{"--health-addr", addr}, args...)...)
	Eventually(t, 20*time.Second, name+" health server", func() (bool, error) {
		if p.Exited() {
			t.Fatalf("%s exited at start:\n%s", name, p.Logs())
		}
		resp, err := metricsClient.Get("http://" + addr + "/health/live")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("/health/live: %s", resp.Status)
	})
	return &HealthDaemon{Process: p, Health: addr}
}

// QueueDepth returns the ready messages and the consumers of queue on the
// stack's broker (the dispatch queue, s.Queue, or its dead-letter queue,
// broker.DeadLetterQueue(s.Queue)), bounded by 5 s.
func (s *Stack) QueueDepth(queue string) (messages, consumers int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return broker.QueueDepth(ctx, broker.Config{URLs: s.AMQPURLs, Queue: queue, DialTimeout: 2 * time.Second})
}

// Messages is QueueDepth's ready messages; it fails the test on an error.
func (s *Stack) Messages(t testing.TB, queue string) int {
	t.Helper()
	n, _, err := s.QueueDepth(queue)
	if err != nil {
		t.Fatalf("depth of %s: %v", queue, err)
	}
	return n
}

// WaitRuns polls the database (through s.Store) for up to timeout until
// every run of ids is in state want (a core.RunState, e.g. "SUCCEEDED").
// It fails the test on timeout, or at once when a run settled in another
// terminal state (terminal with finished_at set: a requeued run, terminal
// but revived, is waited for).
func (s *Stack) WaitRuns(t testing.TB, want string, timeout time.Duration, ids ...string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%d runs to be %s", len(ids), want), func() (bool, error) {
		var n int
		var settled string
		err := s.db.QueryRowContext(context.Background(), `
SELECT count(*) FILTER (WHERE state = $2),
       coalesce(string_agg(id::text || ' ' || state, ', ') FILTER (WHERE state <> $2 AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at IS NOT NULL), '')
  FROM workflow_runs WHERE id = ANY ($1::uuid[])`, ids, want).Scan(&n, &settled)
		if err != nil {
			return false, err
		}
		if settled != "" {
			t.Fatalf("runs settled other than %s: %v", want, settled)
		}
		return n == len(ids), fmt.Errorf("%d of %d runs are %s", n, len(ids), want)
	})
}
