package cli

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// TestAMQPHeartbeatReachesTheBrokerConfig: --amqp-heartbeat is the broker
// Config's Heartbeat of the roles that talk to the broker, the default
// when not given: the interval that bounds how soon a black-holed broker
// connection is noticed (mode 137).
func TestAMQPHeartbeatReachesTheBrokerConfig(t *testing.T) {
	t.Parallel()
	env := &Env{Registry: core.NewRegistry(), Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
	for _, tc := range []struct {
		role supervisor.Role
		args []string
		want time.Duration
	}{
		{supervisor.RoleWorker, []string{"--amqp-heartbeat", "2s"}, 2 * time.Second},
		{supervisor.RolePublisher, []string{"--amqp-heartbeat", "3s"}, 3 * time.Second},
		{supervisor.RoleAll, []string{"--amqp-heartbeat", "4s"}, 4 * time.Second},
		{supervisor.RoleWorker, nil, broker.HeartbeatDefault},
	} {
		var got time.Duration
		app := &cli.App{
			Flags: append(globalFlags(), daemonFlags(tc.role)...),
			Action: func(c *cli.Context) error {
				cfg, err := daemonConfig(c, env, tc.role)
				got = cfg.Broker.Heartbeat
				return err
			},
		}
		if err := app.Run(append([]string{"ffctl", "--health-addr", ""}, tc.args...)); err != nil {
			t.Fatalf("%s %v: %v", tc.role, tc.args, err)
		}
		if got != tc.want {
			t.Errorf("%s %v: Broker.Heartbeat %v, want %v", tc.role, tc.args, got, tc.want)
		}
	}
}
