package broker

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Bounds of the dead-letter queue applied by DeadLetterPolicy when a field
// is zero.
const (
	// DeadLetterMaxLengthDefault is the most messages the dead-letter queue
	// keeps; past it the oldest is dropped.
	DeadLetterMaxLengthDefault = 100000
	// DeadLetterMessageTTLDefault is how long a dead-lettered message is
	// kept (14 days).
	DeadLetterMessageTTLDefault = 14 * 24 * time.Hour
	// DeadLetterPolicyPriority is the policy's priority: above an operator's
	// catch-all policy (0), so that it is the one applied to the queue.
	DeadLetterPolicyPriority = 10
)

// DeadLetterPolicy bounds the dead-letter queue of a dispatch queue with a
// RabbitMQ policy: max-length MaxLength with overflow drop-head (the
// oldest message is dropped, the newest kept) and message-ttl MessageTTL.
//
// A policy, not queue arguments: x-max-length on an existing queue differs
// from its declared arguments, RabbitMQ refuses the redeclare with 406
// PRECONDITION_FAILED, and every upgraded daemon would stop at its
// topology check. A policy changes a live queue in place and can be
// changed back. Policies are set with rabbitmqctl or the management HTTP
// API, not over AMQP, so FlowForge prints them (ffctl broker policy) and
// scripts/up applies them to the brokers it starts. Only one policy
// applies to a queue (the highest priority): a site policy matching the
// dead-letter queue with a higher priority replaces this one.
//
// A message dropped for length or age has no dead-letter target of its
// own (a dead-letter queue's overflow would need another unbounded queue);
// RabbitMQ counts it in its global counters
// (rabbitmq_global_messages_dead_lettered_maxlen_total and
// ..._expired_total with dead_letter_strategy="disabled" on the
// prometheus plugin).
type DeadLetterPolicy struct {
	// Queue is the dispatch queue (default QueueDefault); the policy
	// matches exactly DeadLetterQueue(Queue).
	Queue string
	// MaxLength is the most messages kept (default
	// DeadLetterMaxLengthDefault).
	MaxLength int
	// MessageTTL is how long a message is kept, millisecond resolution
	// (default DeadLetterMessageTTLDefault).
	MessageTTL time.Duration
}

// withDefaults returns p with its zero fields defaulted, or an error when a
// field is negative, the TTL is not a whole number of milliseconds or does
// not fit RabbitMQ's 32-bit message-ttl, or the queue name is too long.
func (p DeadLetterPolicy) withDefaults() (DeadLetterPolicy, error) {
	if p.Queue == "" {
		p.Queue = QueueDefault
	}
	if len(DeadLetterQueue(p.Queue)) > maxQueueNameLen {
		return p, fmt.Errorf("dead-letter policy: queue name %q is too long", p.Queue)
	}
	switch {
	case p.MaxLength < 0:
		return p, fmt.Errorf("dead-letter policy: max length %d is negative", p.MaxLength)
	case p.MaxLength == 0:
		p.MaxLength = DeadLetterMaxLengthDefault
	}
	switch {
	case p.MessageTTL < 0:
		return p, fmt.Errorf("dead-letter policy: message TTL %s is negative", p.MessageTTL)
	case p.MessageTTL == 0:
		p.MessageTTL = DeadLetterMessageTTLDefault
	case p.MessageTTL%time.Millisecond != 0:
		return p, fmt.Errorf("dead-letter policy: message TTL %s is not a whole number of milliseconds", p.MessageTTL)
	case p.MessageTTL.Milliseconds() > 1<<32-1:
		return p, fmt.Errorf("dead-letter policy: message TTL %s exceeds RabbitMQ's limit (about 49 days)", p.MessageTTL)
	}
	return p, nil
}

// PolicySpec is a policy ready to apply: the fields of rabbitmqctl
// set_policy and of the management API's PUT /api/policies/{vhost}/{name}.
type PolicySpec struct {
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Priority   int            `json:"priority"`
	Definition map[string]any `json:"definition"`
}

// Spec returns the policy to apply, named "flowforge-dlq-<queue>", or the
// error of an invalid field (see DeadLetterPolicy's fields).
func (p DeadLetterPolicy) Spec() (PolicySpec, error) {
	p, err := p.withDefaults()
	if err != nil {
		return PolicySpec{}, err
	}
	return PolicySpec{
		Name:     "flowforge-dlq-" + p.Queue,
		Pattern:  "^" + regexp.QuoteMeta(DeadLetterQueue(p.Queue)) + "$",
		ApplyTo:  "queues",
		Priority: DeadLetterPolicyPriority,
		Definition: map[string]any{
			"max-length":  p.MaxLength,
			"overflow":    "drop-head",
			"message-ttl": p.MessageTTL.Milliseconds(),
		},
	}, nil
}

// RabbitmqctlArgs returns the arguments of `rabbitmqctl` that apply s in
// vhost ("/" when empty): set_policy -p vhost --apply-to queues --priority
// N name pattern definition.
func (s PolicySpec) RabbitmqctlArgs(vhost string) []string {
	if vhost == "" {
		vhost = "/"
	}
	def, _ := json.Marshal(s.Definition) // a map of strings and numbers
	return []string{"set_policy", "-p", vhost, "--apply-to", s.ApplyTo, "--priority", fmt.Sprint(s.Priority), s.Name, s.Pattern, string(def)}
}

// ManagementPath returns the management API path that PUTs s in vhost
// ("/" when empty), e.g. /api/policies/%2F/flowforge-dlq-flowforge.dispatch.
func (s PolicySpec) ManagementPath(vhost string) string {
	if vhost == "" {
		vhost = "/"
	}
	return "/api/policies/" + url.PathEscape(vhost) + "/" + url.PathEscape(s.Name)
}

// VhostOf returns the virtual host an AMQP URL names ("/" when it names
// none), or the URL's parse error (password redacted).
func VhostOf(rawURL string) (string, error) {
	name, password, err := describeURL(rawURL, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	u, err := amqp.ParseURI(rawURL)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, redactErr(err, password))
	}
	return u.Vhost, nil
}
