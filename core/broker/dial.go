package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dial connects to the first URL of cfg.URLs that answers, starting after
// the one cfg.Cursor says connected last. cfg must have defaults applied.
// role names the connection in the broker's management UI
// ("flowforge-<role>"). It honours ctx: cancelling it aborts the attempt in
// progress (even mid-handshake) and returns promptly with an error wrapping
// ctx.Err().
func dial(ctx context.Context, cfg Config, role string) (*amqp.Connection, error) {
	conn, _, err := dialCorkable(ctx, cfg, role)
	return conn, err
}

// dialCorkable is dial, returning also the connection's socket, which can
// hold writes back (corkConn; the publisher corks it for each batch).
func dialCorkable(ctx context.Context, cfg Config, role string) (*amqp.Connection, *corkConn, error) {
	n := len(cfg.URLs)
	start := cfg.Cursor.start(n)
	var errs []error
	for k := range n {
		i := (start + k) % n
		raw := cfg.URLs[i]
		name, secret, err := describeURL(raw, i)
		if err == nil {
			if cerr := ctx.Err(); cerr != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, cerr))
				break
			}
			var conn *amqp.Connection
			var sock *corkConn
			conn, sock, err = dialOne(ctx, cfg, raw, role)
			if err == nil {
				cfg.Cursor.record(i)
				cfg.Logger.Info("broker: connected", "url", name, "role", role)
				return conn, sock, nil
			}
			err = redactErr(err, secret)
		}
		cfg.Logger.Warn("broker: dial failed", "url", name, "role", role, "error", err)
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return nil, nil, fmt.Errorf("dial broker: %w", &dialError{errs: errs})
}

// dialOne makes one connection attempt bounded by cfg.DialTimeout and ctx,
// and returns the connection and its socket.
func dialOne(ctx context.Context, cfg Config, rawURL, role string) (*amqp.Connection, *corkConn, error) {
	var (
		mu       sync.Mutex
		netConn  *corkConn
		canceled bool
	)
	// Closing the socket is the only way to interrupt amqp091's handshake.
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		canceled = true
		if netConn != nil {
			_ = netConn.Close()
		}
	})

	props := amqp.NewConnectionProperties()
	props["connection_name"] = "flowforge-" + role
	amqpCfg := amqp.Config{
		Heartbeat:  cfg.Heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: cfg.DialTimeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bound the TLS and AMQP handshake; amqp091 clears the deadline
			// once the connection is open.
			if err := c.SetDeadline(time.Now().Add(cfg.DialTimeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			if canceled {
				_ = c.Close()
				return nil, ctx.Err()
			}
			netConn = newCorkConn(c)
			return netConn, nil
		},
	}
	conn, err := amqp.DialConfig(rawURL, amqpCfg)
	if !stop() {
		// ctx fired: whatever the handshake did, the attempt is abandoned.
		if conn != nil {
			_ = conn.CloseDeadline(time.Now())
		}
		return nil, nil, ctx.Err()
	}
	if err != nil {
		return nil, nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return conn, netConn, nil
}

// describeURL returns a printable name for URL number i (password
// redacted) and its password, or an error if the URL cannot be parsed. The
// error never contains the raw URL.
func describeURL(raw string, i int) (name, password string, err error) {
	u, perr := url.Parse(raw)
	if perr != nil {
		var ue *url.Error
		if errors.As(perr, &ue) {
			perr = ue.Err
		}
		return fmt.Sprintf("broker url #%d", i+1), "", fmt.Errorf("invalid url: %w", perr)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return u.Redacted(), "", fmt.Errorf("invalid url: scheme %q is not amqp or amqps", u.Scheme)
	}
	if u.User != nil {
		password, _ = u.User.Password()
	}
	return u.Redacted(), password, nil
}

// redactedError hides a password that an underlying error message might
// contain while keeping the error chain for errors.Is/As.
type redactedError struct {
	err    error
	secret string
}

func (e *redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.secret, "xxxxx")
}

func (e *redactedError) Unwrap() error { return e.err }

func redactErr(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{err: err, secret: secret}
}

// isAMQPCode reports whether err is an AMQP exception with the given reply
// code.
func isAMQPCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

// lost wraps err from a closed connection or channel so that it also
// matches ErrConnectionLost.
func lost(err error) error {
	if errors.Is(err, ErrConnectionLost) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, err)
}
