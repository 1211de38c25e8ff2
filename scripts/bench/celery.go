package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

//go:embed celeryapp/benchtasks.py
var celeryApp []byte

// celeryPython is Debian's interpreter, the one python3-celery installs for.
const celeryPython = "/usr/bin/python3"

// celerySystem is the Celery column: Debian's python3-celery, a prefork
// worker of 2 processes with acks_late and a no-op task, on the private
// RabbitMQ node.
type celerySystem struct {
	env     *benchEnv
	dir     string
	version string
	seq     int
	w1N     int
}

func (s *celerySystem) key() string { return sysCelery }

func (s *celerySystem) info() systemInfo {
	return systemInfo{Label: "Celery", Version: s.version, Notes: []string{
		"worker: celery worker -P prefork -c 2 --without-gossip --without-mingle --without-heartbeat; task_acks_late, JSON, no result backend",
		"tasks published with publisher confirms (kombu confirm_publish), persistent, to a durable classic queue",
		"completion observed as the broker's global ack counter (rabbitmq_prometheus), polled every 50 ms",
	}}
}

// setup makes sure Debian's python3-celery is there (installing it with
// apt-get when running as root, as scripts/up does for the services).
func (s *celerySystem) setup(ctx context.Context) error {
	if err := ensureCelery(ctx, s.env); err != nil {
		return err
	}
	version := exec.CommandContext(ctx, celeryPython, "-c", "import celery; print(celery.__version__)")
	version.Dir = "/"
	out, err := version.Output()
	if err != nil {
		return fmt.Errorf("celery: %w", err)
	}
	s.version = strings.TrimSpace(string(out))
	s.dir = filepath.Join(s.env.workDir, "celery")
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("celery: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "benchtasks.py"), celeryApp, 0o644); err != nil {
		return fmt.Errorf("celery: %w", err)
	}
	return nil
}

func ensureCelery(ctx context.Context, env *benchEnv) error {
	check := exec.CommandContext(ctx, celeryPython, "-c", "import celery.app")
	check.Dir = "/" // not a directory named celery
	if check.Run() == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("python3-celery is not installed and installing it needs root (sudo apt-get install python3-celery)")
	}
	env.log("  installing python3-celery with apt-get")
	cmd := exec.CommandContext(ctx, "sh", "-c", "apt-get update -qq && apt-get install -y -qq python3-celery")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install python3-celery failed: %w: %s", err, firstLine(lastLines(string(out), 1)))
	}
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func (s *celerySystem) jobs() []job {
	p := s.env.plan
	s.w1N = p.W1N[sysCelery]
	return []job{
		{System: sysCelery, Workload: "W1", Variant: varCelery, run: func(ctx context.Context, _ int) (sample, error) {
			return p.burnDownSized(&s.w1N, func(n int) (sample, error) { return s.burnDown(ctx, n) })
		}},
		{System: sysCelery, Workload: "W2", Variant: varCelery, run: func(ctx context.Context, _ int) (sample, error) {
			return s.continuous(ctx, p.Continuous)
		}},
	}
}

// celeryEnv is the environment of the worker and the publisher.
func (s *celerySystem) celeryEnv(queue string) []string {
	return append(os.Environ(), "BENCH_AMQP_URL="+s.env.mq.URL(), "BENCH_QUEUE="+queue, "PYTHONDONTWRITEBYTECODE=1")
}

// publish runs the publisher ("bulk N" or "loop SECONDS K") and returns
// what it published and how long its publishing took.
func (s *celerySystem) publish(ctx context.Context, queue string, args ...string) (int64, float64, error) {
	cmd := exec.CommandContext(ctx, celeryPython, append([]string{"benchtasks.py"}, args...)...)
	cmd.Dir, cmd.Env = s.dir, s.celeryEnv(queue)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("celery publisher: %w: %s", err, lastLines(stderr.String(), 3))
	}
	var res struct {
		Published int64   `json:"published"`
		Seconds   float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, 0, fmt.Errorf("celery publisher output %q: %w", out, err)
	}
	return res.Published, res.Seconds, nil
}

// startWorker starts the prefork worker on queue.
func (s *celerySystem) startWorker(queue string) (*child, error) {
	cmd := exec.Command(celeryPython, "-m", "celery", "-A", "benchtasks", "worker", "-P", "prefork", "-c", "2",
		"-Q", queue, "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING")
	cmd.Dir, cmd.Env = s.dir, s.celeryEnv(queue)
	return startChild("celery", cmd, filepath.Join(s.dir, queue+".log"))
}

// acked is the broker's count of acknowledged messages so far.
func (s *celerySystem) acked(ctx context.Context) (float64, error) {
	m, err := s.env.mq.metrics(ctx)
	if err != nil {
		return 0, err
	}
	return m["rabbitmq_global_messages_acknowledged_total"], nil
}

// burnDown is Celery's W1: n tasks published before the worker starts; the
// clock runs from starting the worker until the broker has counted n acks.
func (s *celerySystem) burnDown(ctx context.Context, n int) (sample, error) {
	smp := sample{}
	s.seq++
	queue := "celery_bench_" + strconv.Itoa(s.seq)
	defer s.env.deleteQueues(ctx, queue)
	if _, _, err := s.publish(ctx, queue, "bulk", strconv.Itoa(n)); err != nil {
		return smp, err
	}
	base, err := s.acked(ctx)
	if err != nil {
		return smp, err
	}
	start := time.Now()
	w, err := s.startWorker(queue)
	if err != nil {
		return smp, err
	}
	defer w.stop(syscall.SIGQUIT, 10*time.Second) // cold shutdown: the queue is deleted after
	err = pollEvery(50*time.Millisecond, 10*time.Minute, func() (bool, error) {
		if w.exited() {
			return false, fmt.Errorf("celery worker exited: %s", w.tail(10))
		}
		a, err := s.acked(ctx)
		return a-base >= float64(n), err
	})
	if err != nil {
		return smp, fmt.Errorf("celery: %w", err)
	}
	secs := time.Since(start).Seconds()
	smp.Metrics = map[string]float64{metricN: float64(n), metricDrainS: secs, metricTasksPerS: float64(n) / secs}
	return smp, nil
}

// continuous is Celery's W2: 8 closed-loop publishers (each waits for its
// publish to be confirmed) for dur against a running worker; runs/s are
// the broker's acks inside the window.
func (s *celerySystem) continuous(ctx context.Context, dur time.Duration) (sample, error) {
	smp := sample{}
	s.seq++
	queue := "celery_bench_" + strconv.Itoa(s.seq)
	defer s.env.deleteQueues(ctx, queue)
	w, err := s.startWorker(queue)
	if err != nil {
		return smp, err
	}
	defer w.stop(syscall.SIGQUIT, 10*time.Second) // cold shutdown: the queue is deleted after
	base, err := s.acked(ctx)
	if err != nil {
		return smp, err
	}
	if _, _, err := s.publish(ctx, queue, "bulk", "8"); err != nil {
		return smp, err
	}
	var a0 float64
	err = pollEvery(50*time.Millisecond, time.Minute, func() (bool, error) { // warm-up: the worker consumes
		a0, err = s.acked(ctx)
		return a0-base >= 8, err
	})
	if err != nil {
		return smp, fmt.Errorf("celery warm-up: %w", err)
	}
	published, window, err := s.publish(ctx, queue, "loop", strconv.FormatFloat(dur.Seconds(), 'f', -1, 64), "8")
	if err != nil {
		return smp, err
	}
	a1, err := s.acked(ctx)
	if err != nil {
		return smp, err
	}
	smp.Metrics = map[string]float64{metricRunsPerS: (a1 - a0) / window, metricTriggerPerS: float64(published) / window}
	return smp, nil
}
