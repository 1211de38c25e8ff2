package broker

import (
	"strings"
	"testing"
	"time"
)

func TestDeadLetterPolicySpec(t *testing.T) {
	cases := []struct {
		name    string
		p       DeadLetterPolicy
		wantErr string
		wantDef map[string]any
		pattern string
	}{
		{name: "defaults", p: DeadLetterPolicy{}, pattern: `^flowforge\.dispatch\.dead$`,
			wantDef: map[string]any{"max-length": DeadLetterMaxLengthDefault, "overflow": "drop-head", "message-ttl": DeadLetterMessageTTLDefault.Milliseconds()}},
		{name: "configured", p: DeadLetterPolicy{Queue: "a.b+c", MaxLength: 7, MessageTTL: 90 * time.Second}, pattern: `^a\.b\+c\.dead$`,
			wantDef: map[string]any{"max-length": 7, "overflow": "drop-head", "message-ttl": int64(90000)}},
		{name: "negative length", p: DeadLetterPolicy{MaxLength: -1}, wantErr: "negative"},
		{name: "negative ttl", p: DeadLetterPolicy{MessageTTL: -time.Second}, wantErr: "negative"},
		{name: "sub-millisecond ttl", p: DeadLetterPolicy{MessageTTL: 1500 * time.Microsecond}, wantErr: "milliseconds"},
		{name: "ttl past 32 bits", p: DeadLetterPolicy{MessageTTL: 50 * 24 * time.Hour}, wantErr: "limit"},
		{name: "queue name too long", p: DeadLetterPolicy{Queue: strings.Repeat("q", 251)}, wantErr: "too long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.p.Spec()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Pattern != c.pattern || s.ApplyTo != "queues" || s.Priority != DeadLetterPolicyPriority {
				t.Fatalf("spec %+v, want pattern %s", s, c.pattern)
			}
			for k, v := range c.wantDef {
				if s.Definition[k] != v {
					t.Errorf("definition[%s] = %#v, want %#v", k, s.Definition[k], v)
				}
			}
		})
	}
	s, _ := DeadLetterPolicy{Queue: "q"}.Spec()
	if got := strings.Join(s.RabbitmqctlArgs(""), " "); got != `set_policy -p / --apply-to queues --priority 10 flowforge-dlq-q ^q\.dead$ {"max-length":100000,"message-ttl":1209600000,"overflow":"drop-head"}` {
		t.Errorf("rabbitmqctl args: %s", got)
	}
	if got := s.ManagementPath("/"); got != "/api/policies/%2F/flowforge-dlq-q" {
		t.Errorf("management path: %s", got)
	}
}

func TestVhostOf(t *testing.T) {
	for url, want := range map[string]string{"amqp://u:p@h:5672/": "/", "amqp://h": "/", "amqp://u:p@h/prod": "prod", "amqp://h/%2Fx": "/x"} {
		if got, err := VhostOf(url); err != nil || got != want {
			t.Errorf("VhostOf(%s) = %q, %v; want %q", url, got, err, want)
		}
	}
	if _, err := VhostOf("http://u:s3cret@h/"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a non-amqp URL: err = %v, want an error without the password", err)
	}
}
