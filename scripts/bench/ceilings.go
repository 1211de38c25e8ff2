package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ceilingSystem measures what the hardware allows the two servers: pgbench
// single-row UPDATE transactions (durable commits) and raw quorum-queue
// publishing with confirms and consuming with manual acks.
type ceilingSystem struct {
	env    *benchEnv
	script string
	seq    int
}

func (s *ceilingSystem) key() string { return sysCeiling }

func (s *ceilingSystem) info() systemInfo {
	return systemInfo{Label: "ceiling", Notes: []string{
		"pgbench -M prepared -j 2, a custom script of one UPDATE pgbench_accounts of a random row per transaction (scale 10), 8 and 32 clients",
		"RabbitMQ: one connection publishes persistent 200-byte messages to a quorum queue with publisher confirms, at most 200 unconfirmed, then one consumer (prefetch 200) acks each message",
	}}
}

// pgbenchDB is the ceiling's own database.
const pgbenchDB = "pgbench"

func (s *ceilingSystem) setup(ctx context.Context) error {
	if err := s.env.pg.createDB(ctx, pgbenchDB, ""); err != nil {
		return err
	}
	s.script = filepath.Join(s.env.workDir, "update1.sql")
	body := "\\set aid random(1, 100000 * :scale)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
	if err := os.WriteFile(s.script, []byte(body), 0o644); err != nil {
		return fmt.Errorf("pgbench script: %w", err)
	}
	_, err := s.pgbench(ctx, "-i", "-s", "10", "-q")
	return err
}

func (s *ceilingSystem) pgbench(ctx context.Context, args ...string) (string, error) {
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.env.pg.Port), "-U", "postgres"}
	cmd := exec.CommandContext(ctx, filepath.Join(s.env.pg.BinDir, "pgbench"), append(append(base, args...), pgbenchDB)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pgbench %v: %w: %s", args, err, lastLines(string(out), 3))
	}
	return string(out), nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// updates runs the single-row UPDATE script with clients clients for d.
func (s *ceilingSystem) updates(ctx context.Context, clients int, d time.Duration) (sample, error) {
	out, err := s.pgbench(ctx, "-n", "-M", "prepared", "-j", "2", "-c", strconv.Itoa(clients),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", s.script)
	if err != nil {
		return sample{}, err
	}
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return sample{}, fmt.Errorf("pgbench: no tps in %q", lastLines(out, 5))
	}
	tps, _ := strconv.ParseFloat(m[1], 64)
	return sample{Metrics: map[string]float64{metricOpsPerS: tps}}, nil
}

func (s *ceilingSystem) jobs() []job {
	d := s.env.plan.Ceiling
	var rabbit *[2]sample // publish and consume come from one measurement
	return []job{
		{System: sysCeiling, Workload: "C", Variant: varPgbench8, run: func(ctx context.Context, _ int) (sample, error) { return s.updates(ctx, 8, d) }},
		{System: sysCeiling, Workload: "C", Variant: varPgbench32, run: func(ctx context.Context, _ int) (sample, error) { return s.updates(ctx, 32, d) }},
		{System: sysCeiling, Workload: "C", Variant: varPublish, run: func(ctx context.Context, _ int) (sample, error) {
			p, c, err := s.queueRoundTrip(ctx, d)
			rabbit = &[2]sample{p, c}
			return p, err
		}},
		{System: sysCeiling, Workload: "C", Variant: varConsume, run: func(ctx context.Context, _ int) (sample, error) {
			if rabbit == nil || rabbit[1].Metrics == nil {
				return sample{}, fmt.Errorf("the publish ceiling failed")
			}
			return rabbit[1], nil
		}},
	}
}

// queueRoundTrip publishes to a fresh quorum queue for d with confirms
// (window 200), then consumes everything with manual acks.
func (s *ceilingSystem) queueRoundTrip(ctx context.Context, d time.Duration) (pub, con sample, err error) {
	conn, err := amqp.Dial(s.env.mq.URL())
	if err != nil {
		return pub, con, fmt.Errorf("ceiling: %w", err)
	}
	defer conn.Close()
	s.seq++
	queue := fmt.Sprintf("ceiling_%d", s.seq)
	defer s.env.deleteQueues(ctx, queue)
	n, secs, err := publishConfirmed(ctx, conn, queue, d, 200)
	if err != nil {
		return pub, con, err
	}
	pub = sample{Metrics: map[string]float64{metricOpsPerS: float64(n) / secs, metricN: float64(n)}}
	csecs, err := consumeAcked(conn, queue, n, 200)
	if err != nil {
		return pub, con, err
	}
	con = sample{Metrics: map[string]float64{metricOpsPerS: float64(n) / csecs, metricN: float64(n),
		metricPubConsPerS: float64(n) / (secs + csecs)}}
	return pub, con, nil
}

func publishConfirmed(ctx context.Context, conn *amqp.Connection, queue string, d time.Duration, window int) (int, float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, fmt.Errorf("ceiling publish: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return 0, 0, fmt.Errorf("ceiling declare: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return 0, 0, fmt.Errorf("ceiling confirm mode: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 2*window))
	body := make([]byte, 200)
	msg := amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body}
	start := time.Now()
	deadline := start.Add(d)
	sent, inflight := 0, 0
	for time.Now().Before(deadline) || inflight > 0 {
		for inflight < window && time.Now().Before(deadline) {
			if err := ch.PublishWithContext(ctx, "", queue, false, false, msg); err != nil {
				return 0, 0, fmt.Errorf("ceiling publish: %w", err)
			}
			sent, inflight = sent+1, inflight+1
		}
		c, ok := <-confirms
		if !ok || !c.Ack {
			return 0, 0, fmt.Errorf("ceiling publish: message not confirmed")
		}
		inflight--
	}
	return sent, time.Since(start).Seconds(), nil
}

func consumeAcked(conn *amqp.Connection, queue string, n, prefetch int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("ceiling consume: %w", err)
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, fmt.Errorf("ceiling qos: %w", err)
	}
	start := time.Now()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("ceiling consume: %w", err)
	}
	timeout := time.After(5 * time.Minute)
	for got := 0; got < n; got++ {
		select {
		case dl, ok := <-deliveries:
			if !ok {
				return 0, fmt.Errorf("ceiling consume: channel closed after %d", got)
			}
			if err := dl.Ack(false); err != nil {
				return 0, fmt.Errorf("ceiling ack: %w", err)
			}
		case <-timeout:
			return 0, fmt.Errorf("ceiling consume: %d of %d after 5m", got, n)
		}
	}
	return time.Since(start).Seconds(), nil
}
