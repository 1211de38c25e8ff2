package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/broker"
)

func brokerCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "broker",
		Usage:     "RabbitMQ settings FlowForge needs that are not set over AMQP",
		UsageText: "ffctl broker policy [--dlq-max-length N] [--dlq-message-ttl D] [-o json]\n\nExample:\n  ffctl broker policy --dlq-max-length 50000",
		Subcommands: []*cli.Command{{
			Name:  "policy",
			Usage: "print the policy that bounds the dead-letter queue, as a rabbitmqctl command and a management API call",
			UsageText: "ffctl broker policy [--dlq-max-length N] [--dlq-message-ttl D] [-o json]\n\n" +
				"The dead-letter queue (<queue>.dead) is bounded by a RabbitMQ policy, not by queue\n" +
				"arguments (changed arguments on an existing queue are refused with 406 and stop every\n" +
				"daemon at its topology check). Policies are set with rabbitmqctl or the management HTTP\n" +
				"API, not over AMQP, so this prints both; run one of them (scripts/up does it for the\n" +
				"brokers it starts). Past the length the oldest dead letter is dropped; past the TTL it\n" +
				"expires; RabbitMQ counts both (rabbitmq_global_messages_dead_lettered_maxlen_total and\n" +
				"..._expired_total, dead_letter_strategy=\"disabled\", on its prometheus plugin).\n\n" +
				"Example:\n  ffctl broker policy --dlq-max-length 50000 --dlq-message-ttl 168h\n  eval \"$(ffctl broker policy | sed -n 2p)\"",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "dlq-max-length", Value: broker.DeadLetterMaxLengthDefault, Usage: "most dead letters kept; past it the oldest is dropped", EnvVars: []string{"FLOWFORGE_DLQ_MAX_LENGTH"}},
				&cli.DurationFlag{Name: "dlq-message-ttl", Value: broker.DeadLetterMessageTTLDefault, Usage: "how long a dead letter is kept (whole milliseconds, at most about 49 days)", EnvVars: []string{"FLOWFORGE_DLQ_MESSAGE_TTL"}},
				outputFlag(),
			},
			Action: func(c *cli.Context) error {
				format, err := outputFormat(c)
				if err != nil {
					return err
				}
				if c.Int("dlq-max-length") < 1 {
					return usageError("--dlq-max-length %d: must be at least 1", c.Int("dlq-max-length"))
				}
				if c.Duration("dlq-message-ttl") <= 0 {
					return usageError("--dlq-message-ttl %s: must be positive", c.Duration("dlq-message-ttl"))
				}
				spec, err := broker.DeadLetterPolicy{Queue: c.String("queue"), MaxLength: c.Int("dlq-max-length"), MessageTTL: c.Duration("dlq-message-ttl")}.Spec()
				if err != nil {
					return usageError("%v", err)
				}
				vhost := "/"
				if urls := brokerConfig(c, nil).URLs; len(urls) > 0 {
					if vhost, err = broker.VhostOf(urls[0]); err != nil {
						return usageError("--amqp-url: %v", err)
					}
				}
				if format == "json" {
					return writeJSON(env.Stdout, map[string]any{"vhost": vhost, "policy": spec, "management_path": spec.ManagementPath(vhost)})
				}
				args := spec.RabbitmqctlArgs(vhost)
				quoted := make([]string, len(args))
				for i, a := range args {
					quoted[i] = shellQuote(a)
				}
				body, _ := json.Marshal(map[string]any{"pattern": spec.Pattern, "apply-to": spec.ApplyTo, "priority": spec.Priority, "definition": spec.Definition})
				fmt.Fprintf(env.Stdout, "# with rabbitmqctl on a broker node:\nrabbitmqctl %s\n# or with the management plugin:\ncurl -u USER:PASS -X PUT -H 'content-type: application/json' %s -d %s\n",
					strings.Join(quoted, " "), shellQuote("http://HOST:15672"+spec.ManagementPath(vhost)), shellQuote(string(body)))
				return nil
			},
		}},
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
