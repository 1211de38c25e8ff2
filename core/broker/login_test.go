package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestIsLoginRefusedTellsARefusalFromAnOutage: mode 91. A 403 or a 530 for
// the vhost is a refusal (definite only when the broker sent it); a 530 for
// a connection limit or a vhost that is down, a network error (also the
// 501 FRAME_ERROR amqp091 makes of a connection reset once the protocol
// header is written) and other exceptions are not.
func TestIsLoginRefusedTellsARefusalFromAnOutage(t *testing.T) {
	t.Parallel()
	server := func(code int, reason string) error {
		return fmt.Errorf("dial broker: %w", &amqp.Error{Code: code, Reason: reason, Server: true})
	}
	for _, tc := range []struct {
		name              string
		err               error
		refused, definite bool
	}{
		{"nil", nil, false, false},
		{"wrong password, inferred by amqp091", fmt.Errorf("dial: %w", amqp.ErrCredentials), true, false},
		{"wrong password, sent by the broker", server(amqp.AccessRefused, "ACCESS_REFUSED - Login was refused"), true, true},
		{"no SASL mechanism in common", amqp.ErrSASL, true, false},
		{"unknown vhost", server(amqp.NotAllowed, "NOT_ALLOWED - vhost nosuch not found"), true, true},
		{"vhost refused to the user", server(amqp.NotAllowed, "NOT_ALLOWED - access to vhost '/' refused for user 'bob'"), true, true},
		{"connection limit", server(amqp.NotAllowed, "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached"), false, false},
		{"vhost down", server(amqp.NotAllowed, "NOT_ALLOWED - vhost / is down"), false, false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, false},
		{"connection reset after the protocol header", &amqp.Error{Code: amqp.FrameError, Reason: "read tcp 127.0.0.1:40000->127.0.0.1:5672: read: connection reset by peer"}, false, false},
		{"forced close", server(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure"), false, false},
	} {
		refused, definite := IsLoginRefused(tc.err)
		if refused != tc.refused || definite != tc.definite {
			t.Errorf("%s: IsLoginRefused = %v, %v; want %v, %v", tc.name, refused, definite, tc.refused, tc.definite)
		}
	}
}

// TestCheckLoginReportsARefusalAndPassesAnOutage: mode 91, against the
// broker. A wrong password or an unknown vhost comes back wrapping
// ErrLoginRefused with the broker's reason, within a few seconds; a login
// accepted, a closed port and a broker that drops the connection once
// after the credentials (inferred as a refusal by amqp091, but not
// repeated) come back nil.
func TestCheckLoginReportsARefusalAndPassesAnOutage(t *testing.T) {
	t.Parallel()
	good := testURL(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	withUser := func(user, pass, vhost string) string {
		v := *u
		v.User = url.UserPassword(user, pass)
		v.Path = "/" + vhost
		return v.String()
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "amqp://guest:guest@" + closed.Addr().String() + "/"
	closed.Close()
	for _, tc := range []struct {
		name string
		url  string
		want string // in the error; "" for nil
	}{
		{"accepted", good, ""},
		{"wrong password", withUser(u.User.Username(), "wrong-password", ""), "username or password not allowed"},
		{"unknown vhost", withUser(u.User.Username(), mustPassword(u), "ff-no-such-vhost"), "NOT_ALLOWED - vhost ff-no-such-vhost not found"},
		{"closed port", closedURL, ""},
		{"dropped once after the credentials", dropOnceAfterCredentials(t, u.Host, good), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err := CheckLogin(ctx, Config{URLs: []string{tc.url}, DialTimeout: 5 * time.Second})
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("CheckLogin took %s", d)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckLogin: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrLoginRefused) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "wrong-password") {
				t.Fatalf("CheckLogin: %v; want ErrLoginRefused with %q and no password", err, tc.want)
			}
		})
	}
}

func mustPassword(u *url.URL) string {
	p, _ := u.User.Password()
	return p
}

// dropOnceAfterCredentials returns rawURL pointed at a proxy to target
// whose first connection is closed, without a word, when the client sends
// its credentials (connection.start-ok, after the 8-byte protocol header):
// what a broker that goes away at that instant looks like. Later
// connections are forwarded as they are.
func dropOnceAfterCredentials(t *testing.T, target, rawURL string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			wg.Go(func() { _, _ = io.Copy(c, b); c.Close() })
			wg.Go(func() {
				defer b.Close()
				if first {
					if _, err := io.CopyN(b, c, 8); err == nil {
						_, _ = c.Read(make([]byte, 4096)) // start-ok: dropped
					}
					c.Close()
					return
				}
				_, _ = io.Copy(b, c)
			})
		}
	})
	v, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	v.Host = l.Addr().String()
	return v.String()
}
