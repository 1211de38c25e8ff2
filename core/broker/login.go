package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrLoginRefused is wrapped by CheckLogin's error when the broker answered
// and refused FlowForge's login: a wrong user or password, an unknown
// vhost, or a vhost the user may not use. Retrying does not help until the
// configuration changes.
var ErrLoginRefused = errors.New("broker refused the login")

// IsLoginRefused reports whether err, from a dial, says the broker refused
// the login rather than that it could not be reached; definite is false
// when amqp091 inferred the refusal from a socket closed without a reply
// after the credentials were sent (RabbitMQ answers a wrong password so,
// 3 s later, to a client that does not advertise
// authentication_failure_close, which amqp091 cannot) and so cannot be
// told apart from a broker that went away at that instant. Refusals: 403
// ACCESS_REFUSED (credentials, or no SASL mechanism in common) and 530
// NOT_ALLOWED for the vhost (not found, or refused to the user), but not a
// 530 that a connection limit or a vhost that is down sends: those pass.
func IsLoginRefused(err error) (refused, definite bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false, false
	}
	switch {
	case ae.Code == amqp.AccessRefused:
		return true, ae.Server
	case ae.Code == amqp.NotAllowed && ae.Server:
		reason := strings.ToLower(ae.Reason)
		if strings.Contains(reason, "limit") || strings.Contains(reason, "is down") {
			return false, false
		}
		return true, true
	}
	return false, false
}

// CheckLogin dials cfg's URLs once, as Ping does (a cursor of its own, so
// the daemons' rotation is untouched), and returns an error wrapping
// ErrLoginRefused and the broker's reply when the broker refused the login
// (IsLoginRefused); a refusal amqp091 only inferred counts when a second
// dial is refused too. It returns nil when the login was accepted (the
// connection is closed) and when the broker could not be reached or ctx
// ended: an outage is for the daemons' loops to wait out. Meant for a
// daemon's start; bounded by cfg.DialTimeout per URL and ctx.
func CheckLogin(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("check broker login: %w", err)
	}
	cfg.Cursor = nil
	for try := 1; ; try++ {
		conn, err := dial(ctx, cfg, "login-check")
		if err == nil {
			_ = conn.CloseDeadline(time.Now().Add(cfg.DialTimeout))
			return nil
		}
		refused, definite := IsLoginRefused(err)
		if !refused || ctx.Err() != nil {
			return nil
		}
		if definite || try == 2 {
			return fmt.Errorf("%w (check the user, password and vhost of --amqp-url): %w", ErrLoginRefused, err)
		}
	}
}
