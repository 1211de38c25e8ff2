package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

// SoakEnv turns TestChaosSoak on (`make soak`); without it the test is
// skipped. SoakOutEnv names the file its JSON summary is written to
// (default: soak-summary.json in the test's working directory, e2e/).
const (
	SoakEnv     = "FLOWFORGE_SOAK"
	SoakOutEnv  = "FLOWFORGE_SOAK_OUT"
	SoakRunsEnv = "FLOWFORGE_SOAK_RUNS"
)

// soakSummary is the JSON summary TestChaosSoak writes.
type soakSummary struct {
	Seed             uint64         `json:"seed"`
	Runs             int            `json:"runs"`
	TriggerCalls     int64          `json:"trigger_calls"`
	TriggerRetries   int64          `json:"trigger_retries"`
	Faults           []soakFault    `json:"faults"`
	FaultCounts      map[string]int `json:"fault_counts"`
	Succeeded        int            `json:"runs_succeeded"`
	NotSucceeded     int            `json:"runs_not_succeeded"`
	Lost             int            `json:"runs_lost"`
	Tasks            int            `json:"tasks"`
	Executions       int            `json:"executions"`
	TasksRunTwice    int            `json:"tasks_run_more_than_once"`
	AttemptsRepeated int            `json:"attempts_run_twice"`
	MaxExecutions    int            `json:"max_executions_of_a_task"`
	DoctorFindings   int            `json:"doctor_findings"`
	ChaosSeconds     float64        `json:"chaos_seconds"`
	SettleSeconds    float64        `json:"settle_seconds"`
	TotalSeconds     float64        `json:"total_seconds"`
}

// soakFault is one fault the soak applied, at AtSeconds after its start.
type soakFault struct {
	AtSeconds float64 `json:"at_s"`
	Kind      string  `json:"kind"`
	Target    string  `json:"target,omitempty"`
}

// soakDaemon is a daemon the soak kills and restarts.
type soakDaemon struct {
	name, role string
	args       []string
	env        []string
	p          *harness.Process
}

// TestChaosSoak is `make soak` (issue 29, item 5; skipped unless
// FLOWFORGE_SOAK=1): 1,000 runs (FLOWFORGE_SOAK_RUNS) of a three-task chain
// of shell tasks, each triggered with its own idempotency key and retried
// until ffctl says it is done, while every daemon (a scheduler, a
// publisher, three workers) is SIGKILLed at random and restarted, the
// primary PostgreSQL is restarted, the RabbitMQ node is restarted, one
// worker is cut from PostgreSQL for a few seconds (a black hole), and the
// primary is killed and its synchronous standby promoted. At the end every
// key names exactly one run and every run SUCCEEDED (0 lost), no task
// attempt ran twice (each execution is a distinct attempt: the failure
// model's bound), `ffctl doctor` finds nothing, and the summary is written
// as JSON (FLOWFORGE_SOAK_OUT). Bounded: the chaos lasts as long as the
// triggers, at most 10 minutes, and the settling at most 5.
func TestChaosSoak(t *testing.T) {
	if os.Getenv(SoakEnv) != "1" {
		t.Skipf("the chaos soak runs with %s=1 (make soak)", SoakEnv)
	}
	runs := 1000
	if n, err := strconv.Atoi(os.Getenv(SoakRunsEnv)); err == nil && n > 0 {
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("soak: %d runs, seed %d", runs, seed)
	start := time.Now()

	primary := harness.StartPostgres(t)
	standby := harness.StartStandby(t, primary, harness.StandbyOptions{Synchronous: true})
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{})
	dbURL := failoverURL(t, storetest.NewDatabaseOn(t, primary.URL("postgres")), primary, standby)
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: dbURL, AMQPURLs: []string{rabbit.URL()}})
	// worker-a reaches the primary through a proxy (the partition's): its
	// URL names the proxy first and the standby second, so it follows the
	// failover like the others.
	pp := harness.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("%s,127.0.0.1:%d", pp.Addr, standby.Port)
	partitioned := u.String()

	execs := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, fmt.Sprintf(`
name: soak
tasks:
  - {name: a, handler: shell, params: {command: ["sh", "-c", "echo \"$FLOWFORGE_TASK_RUN_ID $FLOWFORGE_ATTEMPT\" >> %[1]s"]}, retry: {max_attempts: 5, initial_backoff: 200ms, max_backoff: 2s}}
  - {name: b, handler: shell, depends_on: [a], params: {command: ["sh", "-c", "echo \"$FLOWFORGE_TASK_RUN_ID $FLOWFORGE_ATTEMPT\" >> %[1]s; sleep 0.2"]}, retry: {max_attempts: 5, initial_backoff: 200ms, max_backoff: 2s}}
  - {name: c, handler: shell, depends_on: [b], params: {command: ["sh", "-c", "echo \"$FLOWFORGE_TASK_RUN_ID $FLOWFORGE_ATTEMPT\" >> %[1]s"]}, retry: {max_attempts: 5, initial_backoff: 200ms, max_backoff: 2s}}
`, execs))
	daemons := []*soakDaemon{
		{name: "scheduler", role: "scheduler", args: []string{"--sweep-interval", "500ms"}},
		{name: "publisher", role: "publisher"},
		{name: "worker-a", role: "worker", args: []string{"--id", "soak-a", "--allow-shell", "--lease", "3s"}, env: []string{"FLOWFORGE_DATABASE_URL=" + partitioned}},
		{name: "worker-b", role: "worker", args: []string{"--id", "soak-b", "--allow-shell", "--lease", "3s"}},
		{name: "worker-c", role: "worker", args: []string{"--id", "soak-c", "--allow-shell", "--lease", "3s"}},
	}
	generation := map[string]int{}
	startDaemon := func(d *soakDaemon) {
		generation[d.name]++
		d.p = s.DaemonEnv(t, fmt.Sprintf("%s-%d", d.name, generation[d.name]), d.role, d.env, d.args...)
	}
	for _, d := range daemons {
		startDaemon(d)
	}

	// The triggers: four loops over the keys, each retried until ffctl
	// exits 0 (a database or broker away fails the call; the key makes the
	// retry safe).
	var calls, retries atomic.Int64
	ids := make([]string, runs)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= runs {
					return
				}
				for try := 0; ; try++ {
					calls.Add(1)
					out, _, code := s.CLI(t, "run", "trigger", "soak", "--idempotency-key", fmt.Sprintf("soak-%d", i))
					if code == 0 {
						ids[i] = strings.TrimSpace(out)
						break
					}
					retries.Add(1)
					if try > 600 {
						t.Errorf("key soak-%d: no trigger went through in %d tries", i, try)
						return
					}
					time.Sleep(100 * time.Millisecond) // a retry's pace, not a wait for state
				}
			}
		}()
	}
	triggersDone := make(chan struct{})
	go func() { wg.Wait(); close(triggersDone) }()

	// The chaos: a fault every few seconds while the triggers run, the
	// planned ones in order, SIGKILLs of a random daemon between them.
	var faults []soakFault
	counts := map[string]int{}
	note := func(kind, target string) {
		faults = append(faults, soakFault{AtSeconds: time.Since(start).Seconds(), Kind: kind, Target: target})
		counts[kind]++
		t.Logf("soak %6.1fs: %s %s", time.Since(start).Seconds(), kind, target)
	}
	planned := []func(){
		func() { note("postgres-restart", "primary"); primary.Restart(t) },
		func() { note("broker-restart", rabbit.Node); rabbit.Stop(t); rabbit.Start(t) },
		func() {
			note("partition", "worker-a from postgres, 5s")
			pp.SetMode(harness.ProxyBlackhole)
			time.Sleep(5 * time.Second) // the partition's length
			pp.SetMode(harness.ProxyPass)
		},
		func() { note("failover", "primary killed, standby promoted"); primary.Kill(t); standby.Promote(t) },
	}
	chaosEnd := start.Add(10 * time.Minute)
	for round := 0; ; round++ {
		time.Sleep(4 * time.Second) // the chaos's pace, not a wait for state
		done := false
		select {
		case <-triggersDone:
			done = true
		default:
		}
		if (done && len(planned) == 0) || time.Now().After(chaosEnd) {
			break
		}
		if round%2 == 1 && len(planned) > 0 {
			planned[0]()
			planned = planned[1:]
			continue
		}
		d := daemons[rng.IntN(len(daemons))]
		note("sigkill", d.name)
		d.p.Kill()
		startDaemon(d)
	}
	if len(planned) > 0 {
		t.Errorf("the soak ended with %d planned faults not applied", len(planned))
	}
	<-triggersDone
	chaos := time.Since(start)

	// Settling: every run SUCCEEDED.
	settleStart := time.Now()
	s.WaitRuns(t, "SUCCEEDED", 5*time.Minute, ids...)
	settle := time.Since(settleStart)

	sum := soakSummary{Seed: seed, Runs: runs, TriggerCalls: calls.Load(), TriggerRetries: retries.Load(), Faults: faults, FaultCounts: counts,
		ChaosSeconds: chaos.Seconds(), SettleSeconds: settle.Seconds()}
	db := s.DB(t)
	seen := map[string]bool{}
	for i, id := range ids {
		if id == "" || seen[id] {
			t.Errorf("key soak-%d: run %q (empty or shared with another key)", i, id)
			sum.Lost++
		}
		seen[id] = true
	}
	sum.Succeeded = harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE workflow_name = 'soak' AND state = 'SUCCEEDED'`)
	sum.NotSucceeded = harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE workflow_name = 'soak' AND state <> 'SUCCEEDED'`)
	if keys := harness.QueryInt(t, db, `SELECT count(DISTINCT idempotency_key) FROM workflow_runs WHERE workflow_name = 'soak'`); keys != runs {
		t.Errorf("%d keys have a run, want %d", keys, runs)
		sum.Lost += runs - keys
	}
	sum.Tasks = harness.QueryInt(t, db, `SELECT count(*) FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id WHERE r.workflow_name = 'soak'`)
	attempts := map[string]int{}
	perTask := map[string]int{}
	b, err := os.ReadFile(execs)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum.Executions++
		attempts[line]++
		perTask[strings.Fields(line)[0]]++
	}
	for _, n := range attempts {
		if n > 1 {
			sum.AttemptsRepeated++
		}
	}
	for _, n := range perTask {
		if n > 1 {
			sum.TasksRunTwice++
		}
		sum.MaxExecutions = max(sum.MaxExecutions, n)
	}
	doctorOut, doctorErr, code := s.CLI(t, "doctor", "-o", "json")
	var report struct {
		Findings []json.RawMessage `json:"findings"`
	}
	if err := json.Unmarshal([]byte(doctorOut), &report); err != nil {
		t.Errorf("ffctl doctor -o json: exit %d, %v\nstdout: %s\nstderr: %s", code, err, doctorOut, doctorErr)
	}
	sum.DoctorFindings = len(report.Findings)
	sum.TotalSeconds = time.Since(start).Seconds()
	out := os.Getenv(SoakOutEnv)
	if out == "" {
		out = "soak-summary.json"
	}
	js, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(out, append(js, '\n'), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("soak summary (%s):\n%s", out, js)
	switch {
	case sum.Lost > 0 || sum.NotSucceeded > 0 || sum.Succeeded != runs:
		t.Errorf("runs: %d SUCCEEDED, %d not, %d lost; want all %d SUCCEEDED", sum.Succeeded, sum.NotSucceeded, sum.Lost, runs)
	case sum.AttemptsRepeated > 0:
		t.Errorf("%d task attempts ran twice: an attempt is one claim", sum.AttemptsRepeated)
	case code != 0 || sum.DoctorFindings > 0:
		t.Errorf("ffctl doctor: exit %d, %d findings:\n%s\n%s", code, sum.DoctorFindings, doctorOut, doctorErr)
	}
}
