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
