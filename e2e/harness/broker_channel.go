package harness

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BrokerChannel dials the stack's first broker (a 5 s dial timeout) and
// opens a channel on a connection of its own, closed when the test ends:
// a test's own client, to publish, purge, delete or hold messages beside
// the daemons. It fails the test when the broker does not answer.
func (s *Stack) BrokerChannel(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.DialConfig(s.AMQPURLs[0], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("dial %s: %v", s.AMQPURLs[0], err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}
