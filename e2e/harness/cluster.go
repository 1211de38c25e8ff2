package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// StartRabbitCluster starts n RabbitMQ nodes (distinct node names, ports and
// directories, one shared Erlang cookie, all with options opt), then joins
// nodes 2..n to node 1 (rabbitmqctl stop_app, join_cluster, start_app) and
// waits until `cluster_status` on node 1 reports n running nodes. The nodes
// boot in parallel; expect roughly 5 s plus ~4 s per joining node. The
// returned slice is in join order: element 0 is the seed node.
//
// Each node has its own t.Cleanup (see StartRabbit), so a test may Kill,
// Stop or Start any node; nodes that are already down at cleanup time are
// simply removed. The test fails (t.Fatalf) on error, and is skipped if
// RabbitMQ is not installed. n must be >= 1.
func StartRabbitCluster(t testing.TB, n int, opt RabbitOptions) []*Rabbit {
	t.Helper()
	if n < 1 {
		t.Fatalf("harness: StartRabbitCluster: n = %d, need >= 1", n)
	}
	start := time.Now()
	cookie := randomHex(16)
	nodes := make([]*Rabbit, n)
	for i := range nodes {
		nodes[i] = newRabbit(t, opt, cookie)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.start()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("harness: StartRabbitCluster: node %d (%s): %v", i+1, nodes[i].Node, err)
		}
	}
	booted := time.Now()

	seed := nodes[0]
	for _, r := range nodes[1:] {
		r.Ctl(t, "stop_app")
		r.Ctl(t, "join_cluster", seed.Node)
		r.Ctl(t, "start_app")
	}
	want := make([]string, n)
	for i, r := range nodes {
		want[i] = r.Node
	}
	sort.Strings(want)
	Eventually(t, 60*time.Second, fmt.Sprintf("%d running nodes in the cluster", n), func() (bool, error) {
		running, err := seed.runningNodes()
		if err != nil {
			return false, err
		}
		if strings.Join(running, ",") != strings.Join(want, ",") {
			return false, fmt.Errorf("running nodes %v, want %v", running, want)
		}
		return true, nil
	})
	// Every node must accept AMQP again after start_app.
	for _, r := range nodes {
		Eventually(t, 60*time.Second, r.Node+" answering AMQP", func() (bool, error) { return amqpReady(r.Port) })
	}
	t.Logf("harness: rabbitmq cluster of %d ready in %v (parallel boot %v, joins %v)", n,
		time.Since(start).Round(time.Millisecond), booted.Sub(start).Round(time.Millisecond),
		time.Since(booted).Round(time.Millisecond))
	return nodes
}

// RunningNodes returns the sorted names of the cluster members that this node
// reports as running (`rabbitmqctl cluster_status`). The test fails
// (t.Fatalf) if the command fails.
func (r *Rabbit) RunningNodes(t testing.TB) []string {
	t.Helper()
	nodes, err := r.runningNodes()
	if err != nil {
		t.Fatalf("harness: RunningNodes %s: %v", r.Node, err)
	}
	return nodes
}

func (r *Rabbit) runningNodes() ([]string, error) {
	out, err := r.cli("rabbitmqctl", "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	// The CLI may print a banner line before the JSON document.
	if i := strings.Index(out, "{"); i > 0 {
		out = out[i:]
	}
	var st struct {
		RunningNodes []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("parsing cluster_status: %v: %s", err, out)
	}
	sort.Strings(st.RunningNodes)
	return st.RunningNodes, nil
}
