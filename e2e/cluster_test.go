package e2e

// Failure model part 2, mode 18: a three-node RabbitMQ cluster loses the
// node that leads the dispatch queue while runs flow.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// recoveryQueueLeader returns the node that leads the quorum queue, asking
// node ask (`rabbitmqctl list_queues name leader`).
func recoveryQueueLeader(t *testing.T, ask *harness.Rabbit, queue string) (string, error) {
	t.Helper()
	out := ask.Ctl(t, "list_queues", "-q", "--no-table-headers", "name", "leader")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("queue %s not listed by %s:\n%s", queue, ask.Node, out)
}

// TestClusterLeaderNodeKilledWhileRunsFlowNothingLost is mode 18: three
// private RabbitMQ nodes form a cluster and the daemons get all three URLs.
// Runs are triggered, the node leading the dispatch quorum queue is
// SIGKILLed while they are being dispatched, more runs are triggered with
// the node down. A new leader is elected on a survivor, publisher and
// workers fail over to the surviving nodes, every run completes and every
// task ran exactly once (no confirmed dispatch lost, none executed twice).
func TestClusterLeaderNodeKilledWhileRunsFlowNothingLost(t *testing.T) {
	nodes := harness.StartRabbitCluster(t, 3, harness.RabbitOptions{})
	urls := make([]string, len(nodes))
	byName := map[string]*harness.Rabbit{}
	for i, n := range nodes {
		urls[i] = n.URL()
		byName[n.Node] = n
	}
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: urls})
	sched := s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	wa := s.DaemonWithHealth(t, "worker-a", "worker", "--concurrency", "2")
	wb := s.DaemonWithHealth(t, "worker-b", "worker", "--concurrency", "2")
	for _, d := range []*harness.HealthDaemon{pub, wa, wb} {
		recoveryReadyOK(t, d, 30*time.Second, "postgres", "rabbitmq")
	}
	s.Apply(t, `
name: cluster-flow
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: sleep, params: {duration: 200ms}, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [a]}
  - {name: d, handler: noop, depends_on: [b, c]}
`)
	var runs []string
	warm := s.Trigger(t, "cluster-flow")
	runs = append(runs, warm)
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, warm)

	leaderName, err := recoveryQueueLeader(t, nodes[0], s.Queue)
	if err != nil {
		t.Fatal(err)
	}
	leader := byName[leaderName]
	if leader == nil {
		t.Fatalf("leader %q is none of the cluster's nodes", leaderName)
	}
	var survivor *harness.Rabbit
	for _, n := range nodes {
		if n != leader {
			survivor = n
			break
		}
	}
	t.Logf("dispatch queue leader: %s", leaderName)

	// Runs in flight when the leader dies...
	for range 4 {
		runs = append(runs, s.Trigger(t, "cluster-flow"))
	}
	killed := time.Now()
	leader.Kill(t)
	// ...and runs triggered while it is down.
	for range 4 {
		runs = append(runs, s.Trigger(t, "cluster-flow"))
	}
	harness.Eventually(t, 60*time.Second, "a new dispatch queue leader on a surviving node", func() (bool, error) {
		l, err := recoveryQueueLeader(t, survivor, s.Queue)
		return err == nil && l != leaderName && byName[l] != nil, fmt.Errorf("leader %q err %v", l, err)
	})
	for _, id := range runs {
		s.WaitRuns(t, "SUCCEEDED", 90*time.Second, id)
	}
	t.Logf("leader killed to all %d runs completed: %v", len(runs), time.Since(killed).Round(time.Millisecond))
	recoveryAssertAlive(t, sched, pub, wa, wb)
	for _, d := range []*harness.HealthDaemon{pub, wa, wb} {
		recoveryReadyOK(t, d, 30*time.Second, "postgres", "rabbitmq")
	}
	recoveryAssertRanOnce(t, s, runs, wa, wb)
	nacked := harness.Metric(t, pub.Health, "flowforge_publish_total", `outcome="nacked"`)
	timedOut := harness.Metric(t, pub.Health, "flowforge_publish_total", `outcome="timed out"`)
	t.Logf("publisher outcomes across the failover: nacked %v, timed out %v (each left its row pending and was published again)", nacked, timedOut)
	// Every daemon that was connected to the dead node moved to a survivor.
	deadPort := fmt.Sprintf(":%d/", leader.Port)
	for _, d := range []*harness.HealthDaemon{pub, wa, wb} {
		var last string
		for _, l := range recoveryLogs(d.Process, "broker: connected") {
			last = l.str("url")
		}
		if strings.Contains(last, deadPort) {
			t.Errorf("%s's last broker connection is to the killed node (%s)", d.Name, last)
		}
	}
}
