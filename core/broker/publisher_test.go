package broker

import (
	"errors"
	"testing"
	"time"
)

func TestPublisherConnectionLost(t *testing.T) {
	cfg := testConfig(t)
	px, pu := newProxy(t, cfg.URLs[0])
	cfg.URLs = []string{pu}
	p := mustPublisher(t, cfg)

	px.dropAll()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after connection drop")
	}
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: "1", Body: []byte(`{}`)}})
	if !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("err = %v, want ErrConnectionLost", err)
	}
	if out[0] == Confirmed {
		t.Fatal("message confirmed on a lost connection")
	}
}

func TestPublisherClose(t *testing.T) {
	cfg := testConfig(t)
	p, err := DialPublisher(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Close")
	}
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: "1"}})
	if !errors.Is(err, ErrConnectionLost) || out[0] != NotSent {
		t.Fatalf("publish after Close: %v %v", out, err)
	}
	if out, err := p.PublishBatch(testCtx(t), nil); err != nil || len(out) != 0 {
		t.Fatalf("empty batch: %v %v", out, err)
	}
}
