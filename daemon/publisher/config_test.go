package publisher

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
)

func TestConfigRejectsANegativeMaxMessageBytes(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Store: &store.Store{}, Broker: broker.Config{URLs: []string{"amqp://x"}}, MaxMessageBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "--max-message-bytes -1 (Config.MaxMessageBytes): must be positive") {
		t.Fatalf("New with MaxMessageBytes -1: %v", err)
	}
	p, err := New(Config{Store: &store.Store{}, Broker: broker.Config{URLs: []string{"amqp://x"}}})
	if err != nil || p.cfg.MaxMessageBytes != MaxMessageBytesDefault {
		t.Fatalf("default MaxMessageBytes: %v, %v", p.cfg.MaxMessageBytes, err)
	}
}

// TestConfigBoundsMaxMessageBytes: a bound below MaxMessageBytesMin would
// quarantine every dispatch, one above MaxMessageBytesMax is more than the
// broker takes; both are refused naming the flag and the range.
func TestConfigBoundsMaxMessageBytes(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, MaxMessageBytesMin - 1, MaxMessageBytesMax + 1} {
		_, err := New(Config{Store: &store.Store{}, Broker: broker.Config{URLs: []string{"amqp://x"}}, MaxMessageBytes: n})
		if err == nil || !strings.Contains(err.Error(), "--max-message-bytes") {
			t.Errorf("New with MaxMessageBytes %d: %v, want a refusal naming --max-message-bytes", n, err)
		}
	}
	if _, err := New(Config{Store: &store.Store{}, Broker: broker.Config{URLs: []string{"amqp://x"}}, MaxMessageBytes: MaxMessageBytesMin}); err != nil {
		t.Errorf("New with MaxMessageBytes %d: %v", MaxMessageBytesMin, err)
	}
}
