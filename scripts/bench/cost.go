package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// snapshot is a reading of the counters a cost is the difference of.
type snapshot struct {
	lsn                      string
	commits, rows            int64 // pg_stat_database xact_commit; tup_inserted+updated+deleted
	statements               int64 // pg_stat_statements calls of role postgres in the database
	pgCPU, mqCPU             float64
	published, delivered     float64 // RabbitMQ global counters
	acked, confirmed, routed float64
}

// takeSnapshot reads the counters for database db. Statistics of a backend
// reach pg_stat_database when it flushes them (at the latest when it ends),
// so the caller reads after the measured processes' sessions have ended
// (waitSessionsGone).
func (e *benchEnv) takeSnapshot(ctx context.Context, db string) (snapshot, error) {
	var s snapshot
	err := e.pg.admin.QueryRow(ctx, `
SELECT pg_current_wal_lsn()::text,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = $1),
       (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1),
       (SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = $1 AND s.userid = 'postgres'::regrole)`, db).Scan(&s.lsn, &s.commits, &s.rows, &s.statements)
	if err != nil {
		return s, fmt.Errorf("snapshot %s: %w", db, err)
	}
	s.pgCPU, s.mqCPU = treeCPU(e.pg.Pid()), e.mq.CPU()
	m, err := e.mq.metrics(ctx)
	if err != nil {
		return s, err
	}
	s.published = m["rabbitmq_global_messages_received_total"]
	s.delivered = m["rabbitmq_global_messages_delivered_total"]
	s.acked = m["rabbitmq_global_messages_acknowledged_total"]
	s.confirmed = m["rabbitmq_global_messages_confirmed_total"]
	s.routed = m["rabbitmq_global_messages_routed_total"]
	return s, nil
}

// waitSessionsGone waits until no session of role postgres is connected to
// db, so that their statistics have been flushed.
func (e *benchEnv) waitSessionsGone(ctx context.Context, db string) error {
	return pollUntil(30*time.Second, func() (bool, error) {
		var n int
		err := e.pg.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND usename = 'postgres'`, db).Scan(&n)
		return n == 0, err
	})
}

// cost is what a number of tasks cost, per task.
type cost struct {
	Tasks         int64                  `json:"tasks"`
	CommitsWAL    float64                `json:"commits_per_task"`
	CommitsAll    float64                `json:"xact_commit_per_task"`
	WALBytes      float64                `json:"wal_bytes_per_task"`
	Rows          float64                `json:"rows_written_per_task"`
	Statements    float64                `json:"statements_per_task"`
	AMQPPublished float64                `json:"amqp_published_per_task"`
	AMQPDelivered float64                `json:"amqp_delivered_per_task"`
	AMQPAcked     float64                `json:"amqp_acked_per_task"`
	AMQPConfirmed float64                `json:"amqp_confirmed_per_task"`
	PostgresCPUms float64                `json:"postgres_cpu_ms_per_task"`
	RabbitCPUms   float64                `json:"rabbitmq_cpu_ms_per_task"`
	ClientCPUms   float64                `json:"client_cpu_ms_per_task"`
	Daemons       map[string]daemonUsage `json:"daemons,omitempty"`
	TopStatements []statementCost        `json:"top_statements,omitempty"`
}

// costBetween turns two snapshots into per-task figures; WAL commit records
// (write transactions only: a read-only one writes none) are counted with
// pg_waldump over the LSN range.
func (e *benchEnv) costBetween(ctx context.Context, a, b snapshot, tasks int64, clientCPU float64) (cost, error) {
	walBytes, err := e.walDiff(ctx, a.lsn, b.lsn)
	if err != nil {
		return cost{}, err
	}
	commits, err := e.walCommits(ctx, a.lsn, b.lsn)
	if err != nil {
		return cost{}, err
	}
	n := float64(tasks)
	return cost{
		Tasks: tasks, CommitsWAL: float64(commits) / n, CommitsAll: float64(b.commits-a.commits) / n,
		WALBytes: float64(walBytes) / n, Rows: float64(b.rows-a.rows) / n,
		Statements:    float64(b.statements-a.statements) / n,
		AMQPPublished: (b.published - a.published) / n, AMQPDelivered: (b.delivered - a.delivered) / n,
		AMQPAcked: (b.acked - a.acked) / n, AMQPConfirmed: (b.confirmed - a.confirmed) / n,
		PostgresCPUms: (b.pgCPU - a.pgCPU) * 1000 / n, RabbitCPUms: (b.mqCPU - a.mqCPU) * 1000 / n,
		ClientCPUms: clientCPU * 1000 / n,
	}, nil
}

func (e *benchEnv) walDiff(ctx context.Context, from, to string) (int64, error) {
	var n int64
	if err := e.pg.admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint`, from, to).Scan(&n); err != nil {
		return 0, fmt.Errorf("wal diff: %w", err)
	}
	return n, nil
}

// walCommits counts Transaction/COMMIT records between two LSNs with
// pg_waldump --stats=record.
func (e *benchEnv) walCommits(ctx context.Context, from, to string) (int64, error) {
	if from == to {
		return 0, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.pg.BinDir, "pg_waldump"), "--stats=record",
		"-p", filepath.Join(e.pg.Data, "pg_wal"), "-s", from, "-e", to)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("pg_waldump %s..%s: %w: %s", from, to, err, strings.TrimSpace(stderr.String()))
	}
	return parseWaldumpCommits(out)
}

// parseWaldumpCommits reads the COMMIT count (second field of the
// "Transaction/COMMIT" line) of pg_waldump --stats=record output.
func parseWaldumpCommits(out []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "Transaction/COMMIT" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pg_waldump: %q: %w", sc.Text(), err)
			}
			return n, nil
		}
	}
	return 0, nil
}

// statementCost is one statement's share of a workload: its calls, and
// per call its execution and planning time (pg_stat_statements
// total_exec_time and total_plan_time over calls: planning is counted only
// when the statement was planned, plans of them), shared buffers (hit +
// read) and WAL bytes.
type statementCost struct {
	Query           string  `json:"query"`
	Calls           int64   `json:"calls"`
	CallsPerTask    float64 `json:"calls_per_task"`
	BuffersPerCall  float64 `json:"buffers_per_call"`
	MsPerTask       float64 `json:"ms_per_task"`
	ExecMsPerCall   float64 `json:"exec_ms_per_call"`
	PlanMsPerCall   float64 `json:"plan_ms_per_call"`
	PlansPerCall    float64 `json:"plans_per_call"`
	WALBytesPerCall float64 `json:"wal_bytes_per_call"`
}

// resetStatements clears pg_stat_statements (the systems run one at a time).
func (e *benchEnv) resetStatements(ctx context.Context) error {
	if _, err := e.pg.admin.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// statements returns role postgres's statements in db since the last
// reset, the most called first.
func (e *benchEnv) statements(ctx context.Context, db string, tasks int64, limit int) ([]statementCost, error) {
	rows, err := e.pg.admin.Query(ctx, `
SELECT regexp_replace(s.query, '\s+', ' ', 'g') AS q, sum(s.calls)::bigint, sum(s.calls)::float8 / $2,
       sum(s.shared_blks_hit + s.shared_blks_read)::float8 / greatest(sum(s.calls), 1), sum(s.total_exec_time) / $2,
       sum(s.total_exec_time) / greatest(sum(s.calls), 1), sum(s.total_plan_time) / greatest(sum(s.calls), 1),
       sum(s.plans)::float8 / greatest(sum(s.calls), 1), sum(s.wal_bytes)::float8 / greatest(sum(s.calls), 1)
  FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
 WHERE d.datname = $1 AND s.userid = 'postgres'::regrole
 GROUP BY q ORDER BY 2 DESC, q LIMIT $3`, db, float64(tasks), limit)
	if err != nil {
		return nil, fmt.Errorf("statements of %s: %w", db, err)
	}
	defer rows.Close()
	var out []statementCost
	for rows.Next() {
		var s statementCost
		if err := rows.Scan(&s.Query, &s.Calls, &s.CallsPerTask, &s.BuffersPerCall, &s.MsPerTask,
			&s.ExecMsPerCall, &s.PlanMsPerCall, &s.PlansPerCall, &s.WALBytesPerCall); err != nil {
			return nil, fmt.Errorf("statements of %s: %w", db, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// phase is the cost of one phase of a workload and the snapshot it ended
// with (the start of the next phase).
type phase struct {
	cost cost
	end  snapshot
}

// phaseCost waits for the measured sessions on db to end, reads the
// counters, and returns the cost since from with the phase's most called
// statements; pg_stat_statements is reset for the next phase.
func (e *benchEnv) phaseCost(ctx context.Context, db string, from snapshot, tasks int64, clientCPU float64) (phase, error) {
	if err := e.waitSessionsGone(ctx, db); err != nil {
		return phase{}, fmt.Errorf("sessions of %s: %w", db, err)
	}
	end, err := e.takeSnapshot(ctx, db)
	if err != nil {
		return phase{}, err
	}
	c, err := e.costBetween(ctx, from, end, tasks, clientCPU)
	if err != nil {
		return phase{}, err
	}
	if c.TopStatements, err = e.statements(ctx, db, tasks, 25); err != nil {
		return phase{}, err
	}
	if err := e.resetStatements(ctx); err != nil {
		return phase{}, err
	}
	end.statements = 0
	return phase{cost: c, end: end}, nil
}
