package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbit is a private single RabbitMQ node (the recipe of
// e2e/harness/rabbit.go: the package's own server script, a private
// directory for Mnesia, logs, HOME and config, loopback-only listeners),
// with the Prometheus plugin on loopback so that message counters and queue
// depths can be read without an Erlang CLI call.
type rabbit struct {
	Node, Dir      string
	Port, DistPort int
	MetricsPort    int
	scriptDir      string
	env            []string
	proc           *child
}

func rabbitScript() (string, error) {
	if s := os.Getenv("FFTEST_RABBITMQ_SCRIPT"); s != "" {
		return s, nil
	}
	s := "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(s); err == nil {
		return s, nil
	}
	if m, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	return "", fmt.Errorf("no rabbitmq-server script (apt-get install rabbitmq-server)")
}

// startRabbit boots the node and waits until AMQP answers and
// `rabbitmqctl await_startup` says the boot is complete.
func startRabbit(ctx context.Context) (*rabbit, error) {
	script, err := rabbitScript()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ffbench-rmq-")
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	r := &rabbit{Node: "ffbench-" + randomHex(4) + "@localhost", Dir: dir, scriptDir: filepath.Dir(script)}
	for _, port := range []*int{&r.Port, &r.DistPort, &r.MetricsPort} {
		if *port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := r.writeFiles(); err != nil {
		return nil, err
	}
	cmd := exec.Command(script)
	cmd.Dir, cmd.Env = dir, r.env
	if r.proc, err = startChild("rabbitmq", cmd, filepath.Join(dir, "stdout.log")); err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	err = pollUntil(120*time.Second, func() (bool, error) {
		if r.proc.exited() {
			return false, fmt.Errorf("node exited during boot")
		}
		return amqpAnswers(r.Port), nil
	})
	if err == nil {
		_, err = r.ctl(ctx, "await_startup", "--timeout", "120")
	}
	if err != nil {
		out := r.proc.tail(20)
		r.stop()
		return nil, fmt.Errorf("rabbitmq: %w\n%s", err, out)
	}
	return r, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}

func (r *rabbit) writeFiles() error {
	home := filepath.Join(r.Dir, "home")
	for _, d := range []string{home, filepath.Join(r.Dir, "mnesia"), filepath.Join(r.Dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
	}
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users.guest = true\n"+
		"log.file.level = warning\nlog.console = false\n"+
		"prometheus.tcp.port = %d\nprometheus.tcp.ip = 127.0.0.1\n", r.Port, r.MetricsPort)
	files := map[string]string{
		filepath.Join(home, ".erlang.cookie"):     randomHex(16),
		filepath.Join(r.Dir, "enabled_plugins"):   "[rabbitmq_prometheus].\n",
		filepath.Join(r.Dir, "rabbitmq.conf"):     conf,
		filepath.Join(r.Dir, "rabbitmq-env.conf"): "",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "RABBITMQ_") && !strings.HasPrefix(k, "ERL_") && k != "HOME" && k != "NOTIFY_SOCKET" {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "HOME="+home, "RABBITMQ_NODENAME="+r.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1", "RABBITMQ_NODE_PORT="+strconv.Itoa(r.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(r.DistPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(r.Dir, "mnesia"), "RABBITMQ_LOG_BASE="+filepath.Join(r.Dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(r.Dir, "rabbit.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.Dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(r.Dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(r.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_CTL_DIST_PORT_MIN=0", "RABBITMQ_CTL_DIST_PORT_MAX=0", "ERL_EPMD_ADDRESS=127.0.0.1")
	return nil
}

// amqpAnswers reports whether the AMQP 0-9-1 handshake gets a method frame.
func amqpAnswers(port int) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return false
	}
	hdr := make([]byte, 7)
	_, err = io.ReadFull(conn, hdr)
	return err == nil && hdr[0] == 1
}

func (r *rabbit) ctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.scriptDir, "rabbitmqctl"), append([]string{"-n", r.Node}, args...)...)
	cmd.Dir, cmd.Env = r.Dir, r.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// URL is the node's AMQP URL (guest/guest on loopback).
func (r *rabbit) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", r.Port) }

// beamPid is the Erlang VM's pid (the script's child), 0 when unknown.
func (r *rabbit) beamPid() int {
	b, err := os.ReadFile(filepath.Join(r.Dir, "rabbit.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if st, ok := readProcStat(pid); !ok || (pid != r.proc.pid() && st.ppid != r.proc.pid()) {
		return 0
	}
	return pid
}

// CPU is the CPU seconds the node's processes have used so far.
func (r *rabbit) CPU() float64 { return treeCPU(r.proc.pid()) }

// metrics sums each Prometheus metric of the node over its labels (one
// node, one system at a time: the totals are that system's).
func (r *rabbit) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.MetricsPort), nil)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq metrics: %w", err)
	}
	defer resp.Body.Close()
	return parsePromText(resp.Body)
}

// parsePromText sums the samples of the Prometheus text format by metric
// name (labels dropped).
func parsePromText(rd io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		out[strings.TrimSpace(name)] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("rabbitmq metrics: %w", err)
	}
	return out, nil
}

// stop kills the node's VM and the script around it, and removes its
// directory. Only this node's processes are signalled.
func (r *rabbit) stop() {
	if r.proc != nil {
		if pid := r.beamPid(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		r.proc.stop(syscall.SIGKILL, 10*time.Second)
	}
	_ = os.RemoveAll(r.Dir)
}

// deleteQueues deletes the named queues and their dead-letter queues
// (NAME.dead) on the node; a queue that does not exist is no error.
func (r *rabbit) deleteQueues(names ...string) error {
	conn, err := amqp.Dial(r.URL())
	if err != nil {
		return fmt.Errorf("rabbitmq: delete queues: %w", err)
	}
	defer conn.Close()
	for _, n := range names {
		for _, q := range []string{n, n + ".dead"} {
			ch, err := conn.Channel()
			if err != nil {
				return fmt.Errorf("rabbitmq: delete queues: %w", err)
			}
			_, _ = ch.QueueDelete(q, false, false, false) // absent: the channel closes, no harm
			_ = ch.Close()
		}
	}
	return nil
}
