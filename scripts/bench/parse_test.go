package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestParseWaldumpCommits(t *testing.T) {
	out := `Type                                           N      (%)          Record size      (%)             FPI size      (%)
----                                           -      ---          -----------      ---             --------      ---
Heap/INSERT                                 2000 ( 40.00)               150000 ( 50.00)                    0 (  0.00)
Transaction/COMMIT                          1234 ( 24.68)                40722 ( 13.57)                    0 (  0.00)
Transaction/ABORT                              2 (  0.04)                   66 (  0.02)                    0 (  0.00)
`
	n, err := parseWaldumpCommits([]byte(out))
	if err != nil || n != 1234 {
		t.Errorf("parseWaldumpCommits = %d, %v; want 1234", n, err)
	}
	if n, err := parseWaldumpCommits([]byte("Heap/INSERT 1 (100.00)\n")); err != nil || n != 0 {
		t.Errorf("no commit line: %d, %v; want 0", n, err)
	}
}

func TestParsePromText(t *testing.T) {
	in := `# TYPE rabbitmq_global_messages_acknowledged_total counter
rabbitmq_global_messages_acknowledged_total{protocol="amqp091"} 1500
rabbitmq_global_messages_acknowledged_total{protocol="amqp10"} 0
rabbitmq_global_messages_received_total{protocol="amqp091"} 1.5e3
rabbitmq_build_info{version="3.10.8"} 1
`
	m, err := parsePromText(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m["rabbitmq_global_messages_acknowledged_total"] != 1500 || m["rabbitmq_global_messages_received_total"] != 1500 || m["rabbitmq_build_info"] != 1 {
		t.Errorf("parsePromText = %v", m)
	}
}

func TestCopyStatement(t *testing.T) {
	got := copyStatement("task_events",
		[]string{"id", "task_run_id", "run_id", "at", "to_state"},
		[]string{"bigint", "uuid", "uuid", "timestamp with time zone", "text"},
		[]string{"nextval('task_events_id_seq'::regclass)", "", "", "clock_timestamp()", ""},
		"RUN", "TASK")
	want := `INSERT INTO "task_events" ("task_run_id", "run_id", "at", "to_state") SELECT ids.task_id, ids.run_id, s."at" + ids.shift, s."to_state" FROM "task_events" s CROSS JOIN ids WHERE s.run_id = 'RUN'`
	if got != want {
		t.Errorf("copyStatement:\n got %s\nwant %s", got, want)
	}
	runs := copyStatement("workflow_runs", []string{"id", "idempotency_key", "created_at"},
		[]string{"uuid", "text", "timestamp with time zone"}, []string{"", "", "now()"}, "RUN", "TASK")
	if !strings.Contains(runs, "SELECT ids.run_id, NULL, s.\"created_at\" + ids.shift") || !strings.HasSuffix(runs, "WHERE s.id = 'RUN'") {
		t.Errorf("workflow_runs copy: %s", runs)
	}
	outbox := copyStatement("outbox", []string{"task_run_id", "payload"}, []string{"uuid", "jsonb"}, []string{"", ""}, "RUN", "TASK")
	if !strings.HasSuffix(outbox, "WHERE s.task_run_id = 'TASK'") {
		t.Errorf("outbox copy: %s", outbox)
	}
}

func TestWorkflowFiles(t *testing.T) {
	if _, ok := workflowFiles(false, false, false)[wfForEach]; ok {
		t.Errorf("a tree without for_each is given W4e's workflow")
	}
	w := workflowFiles(true, true, false)
	for name, src := range w {
		if _, err := core.ParseDefinition([]byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	def, err := core.ParseDefinition([]byte(w[wfForEach]))
	if err != nil {
		t.Fatal(err)
	}
	if len(def.Tasks) != 2 || def.Tasks[0].ForEach == "" || !strings.HasPrefix(def.Tasks[0].ForEach, "[0, 1, 2") ||
		!strings.HasSuffix(def.Tasks[0].ForEach, fmt.Sprintf(", %d]", forEachWidth-1)) || def.Tasks[1].Name != "join" {
		t.Errorf("W4e's workflow: %+v", def.Tasks)
	}
	if n := strings.Count(w[wfChain], "handler: noop"); n != chainSteps {
		t.Errorf("chain has %d tasks, want %d", n, chainSteps)
	}
	if n := strings.Count(w[wfFan], "handler: noop"); n != fanWidth+1 {
		t.Errorf("fan-out has %d tasks, want %d", n, fanWidth+1)
	}
	if !strings.Contains(w[wfChain], "{name: s10, handler: noop, depends_on: [s9]}") {
		t.Errorf("chain's last step:\n%s", w[wfChain])
	}
}

func TestParseVmHWM(t *testing.T) {
	status := "Name:\tffctl\nVmPeak:\t 1263048 kB\nVmHWM:\t   27320 kB\nVmRSS:\t   20000 kB\n"
	if got := parseVmHWM(status); got != 27320*1024 {
		t.Errorf("parseVmHWM = %d, want %d", got, 27320*1024)
	}
	if got := parseVmHWM("Name:\tx\n"); got != 0 {
		t.Errorf("no VmHWM line: %d, want 0", got)
	}
}

func TestParseConcurrencyDefault(t *testing.T) {
	help := `   --db-max-conns value   connections of the daemon's main database pool (default 10 plus --concurrency) (default: 0) [$FLOWFORGE_DB_MAX_CONNS]
   --concurrency value    worker: handlers run at once (also the prefetch) (default: 16) [$FLOWFORGE_CONCURRENCY]
   --lease value          (default: 30s)
`
	if got := parseConcurrencyDefault([]byte(help)); got != "worker --concurrency 16" {
		t.Errorf("parseConcurrencyDefault = %q, want the --concurrency line's default 16", got)
	}
	if got := parseConcurrencyDefault([]byte("--lease value (default: 30s)\n")); !strings.Contains(got, "unknown") {
		t.Errorf("no --concurrency line: %q, want unknown", got)
	}
}
