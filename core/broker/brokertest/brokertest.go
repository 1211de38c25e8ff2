// Package brokertest gives tests the RabbitMQ named by
// FLOWFORGE_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) and
// dispatch queues of their own on it, as storetest gives them databases.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
)

// DefaultURL is used when FLOWFORGE_TEST_AMQP_URL is unset.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the test broker's AMQP URL after checking that it answers
// (a 2 s dial); when it does not the test is skipped, unless CI is set,
// where it fails.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("FLOWFORGE_TEST_AMQP_URL")
	if u == "" {
		u = DefaultURL
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("broker not reachable: %v", err)
		}
		t.Skipf("broker not reachable: %v", err)
	}
	_ = conn.Close()
	return u
}

// Handlers returns the handler names that workers in this repository's package
// tests register: Queue's cleanup deletes their queues (routing by handler:
// a worker declares a queue per handler, see broker.HandlerQueue). A test
// registering another name leaves its handler queue behind.
func Handlers() []string {
	return []string{"noop", "sleep", "fail", "http", "shell", "ok", "count", "block", "stubborn", "hold", "flaky", "echo", "boom"}
}

// Queue returns a fresh dispatch queue name ("fftest." and 10 hex
// digits); the queue, its dead-letter queue, its exchanges and the queues
// of Handlers() are deleted from the broker at url in t.Cleanup (quietly: a
// queue never declared is fine).
func Queue(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	q := "fftest." + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteTopology(ctx, broker.Config{URLs: []string{url}, Queue: q, Handlers: Handlers()})
	})
	return q
}
