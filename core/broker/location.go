package broker

import (
	"fmt"
	"net"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Location is where an AMQP URL points, for saying which installation a
// command talks to: never the password.
type Location struct {
	Host  string `json:"host"`
	Port  int    `json:"port"`
	User  string `json:"user"`
	Vhost string `json:"vhost"`
}

// Address is host:port.
func (l Location) Address() string { return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)) }

// LocationOf parses an AMQP URL as a dial would (amqp091's defaults: port
// 5672, or 5671 for amqps; vhost "/") and returns where it points. Errors:
// the URL's parse error, its password redacted.
func LocationOf(rawURL string) (Location, error) {
	name, password, err := describeURL(rawURL, 0)
	if err != nil {
		return Location{}, fmt.Errorf("%s: %w", name, err)
	}
	u, err := amqp.ParseURI(rawURL)
	if err != nil {
		return Location{}, fmt.Errorf("%s: %w", name, redactErr(err, password))
	}
	return Location{Host: u.Host, Port: u.Port, User: u.Username, Vhost: u.Vhost}, nil
}
