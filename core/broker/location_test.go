package broker_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/broker"
)

// TestLocationOfNamesTheNodeAndVhostNeverThePassword: amqp091's defaults
// apply; a URL that does not parse is an error without its password.
func TestLocationOfNamesTheNodeAndVhostNeverThePassword(t *testing.T) {
	cases := []struct {
		url  string
		want broker.Location
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", broker.Location{Host: "127.0.0.1", Port: 5672, User: "guest", Vhost: "/"}},
		{"amqp://app:s3cret@rabbit-1/prod", broker.Location{Host: "rabbit-1", Port: 5672, User: "app", Vhost: "prod"}},
		{"amqps://app:s3cret@rabbit-2:5999/%2Fteam", broker.Location{Host: "rabbit-2", Port: 5999, User: "app", Vhost: "/team"}},
	}
	for _, c := range cases {
		got, err := broker.LocationOf(c.url)
		if err != nil || got != c.want {
			t.Errorf("LocationOf(%q) = %+v, %v; want %+v", c.url, got, err, c.want)
		}
	}
	if a := (broker.Location{Host: "::1", Port: 5672}).Address(); a != "[::1]:5672" {
		t.Errorf("Address = %q", a)
	}
	for _, bad := range []string{"http://app:s3cret@rabbit/", "amqp://app:s3cret@rabbit:port/"} {
		if _, err := broker.LocationOf(bad); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("LocationOf(%q): %v, want an error without the password", bad, err)
		}
	}
}
