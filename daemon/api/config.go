package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Client is what the API needs of core/client's Client: every route goes
// through it, as ffctl's commands do.
type Client interface {
	Authenticate(ctx context.Context, secret string) (client.Token, error)
	ResolveID(ctx context.Context, kind store.IDKind, id string) (uuid.UUID, error)
	Trigger(ctx context.Context, workflow string, params any, opts client.TriggerOptions) (client.TriggerResult, error)
	Run(ctx context.Context, id string) (client.Run, error)
	ListRuns(ctx context.Context, f client.RunFilter) ([]client.Run, error)
	Wait(ctx context.Context, id string, opts client.WaitOptions) (client.Run, error)
	Cancel(ctx context.Context, id string, opts client.ActionOptions) (client.CancelResult, error)
	Task(ctx context.Context, id string) (client.Task, error)
	TaskLogs(ctx context.Context, id string, q client.TaskLogQuery) (client.TaskLogPage, error)
	ListDead(ctx context.Context, f client.DeadFilter) ([]client.TaskRun, error)
	RequeueDead(ctx context.Context, ids []string, opts client.ActionOptions) ([]client.RequeueResult, error)
	ListWorkflows(ctx context.Context, limit int) ([]client.WorkflowSummary, error)
	ApplyWorkflow(ctx context.Context, data []byte, opts client.ApplyOptions) (client.ApplyResult, error)
	SendEvent(ctx context.Context, name string, payload any, opts client.SendEventOptions) (client.SendEventResult, error)
	ListEvents(ctx context.Context, f client.EventFilter) ([]client.Event, error)
}

// Defaults and bounds of Config.
const (
	// ListenDefault is `ffctl daemon api`'s address.
	ListenDefault = "127.0.0.1:8090"
	// BodyMaxDefault bounds the body of a trigger, an event, a cancel or
	// a requeue: a run's params (an event's payload) at their limit
	// (core.MaxParamsBytes) and room for the rest of the object.
	BodyMaxDefault = core.MaxParamsBytes + 64<<10
	// WaitDefault is a wait's timeout when the request gives none, and
	// WaitMaxDefault the longest one it may give (Config.WaitMax).
	WaitDefault    = 30 * time.Second
	WaitMaxDefault = 60 * time.Second
	// ReadHeaderTimeoutDefault, ReadTimeoutDefault and IdleTimeoutDefault
	// are the server's: a client slower than these with its headers, its
	// whole request, or idle between requests on a kept-alive connection
	// is cut off. The write timeout is Config.WaitMax plus
	// WriteTimeoutMargin, so a long poll can answer.
	ReadHeaderTimeoutDefault = 5 * time.Second
	ReadTimeoutDefault       = 30 * time.Second
	IdleTimeoutDefault       = 120 * time.Second
	WriteTimeoutMargin       = 30 * time.Second
	// FailedAuthBurstDefault failed authentications a source (a remote IP
	// address) may make at once, and FailedAuthEveryDefault the pace at
	// which it earns one more: past them every request of the source is
	// refused (429) until it has earned one.
	FailedAuthBurstDefault = 10
	FailedAuthEveryDefault = time.Second
	// SourcesMaxDefault bounds the sources whose failures are remembered.
	SourcesMaxDefault = 10000
)

// Config configures the API server.
type Config struct {
	// Listen is the host:port the server listens on (port 0 picks one);
	// empty: ListenDefault.
	Listen string
	// TLSCert and TLSKey are PEM files: given together, the server
	// speaks HTTPS only.
	TLSCert, TLSKey string
	// InsecureNoAuth serves every route without a token, as
	// auth.ActorAnonymous with the admin role. Refused unless Listen is a
	// loopback address.
	InsecureNoAuth bool
	// Client is the path of every route (required).
	Client Client
	// CheckParams checks a task's params for its handler in a workflow
	// applied (daemon/handlers.ValidateParams, as ffctl's); nil checks
	// none.
	CheckParams func(handler string, params json.RawMessage) error
	// BodyMax bounds a trigger's, cancel's or requeue's body in bytes (0:
	// BodyMaxDefault); a workflow file's is core.MaxWorkflowFileBytes.
	BodyMax int64
	// WaitMax is the longest timeout a wait may ask for (0:
	// WaitMaxDefault).
	WaitMax time.Duration
	// ReadHeaderTimeout, ReadTimeout, IdleTimeout: see their defaults.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// FailedAuthBurst and FailedAuthEvery pace a source's failed
	// authentications (0: their defaults).
	FailedAuthBurst int
	FailedAuthEvery time.Duration
	// Logger receives a line per mutating call and per server error (nil:
	// none).
	Logger *slog.Logger
	// Metrics receives the request and failed-authentication counts (nil:
	// a registry of the server's own).
	Metrics *metrics.Metrics
}

// Validate checks c: ValidateSettings, and a Client. Errors name the flag
// and the field.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("api: Config.Client is required")
	}
	return c.ValidateSettings()
}

// ValidateSettings checks c's settings, all but Client (which a
// supervisor provides once connected): a certificate without its key (or
// the reverse), --insecure-no-auth on an address that is not loopback, a
// listen address that is not host:port, a negative bound. Errors are
// *daemon.SettingError naming the flag and the field.
func (c Config) ValidateSettings() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return &daemon.SettingError{Component: "api", Field: "TLSCert, TLSKey", Flag: "tls-cert and --tls-key", Value: fmt.Sprintf("%q and %q", c.TLSCert, c.TLSKey), Want: "given together"}
	}
	addr := cmp.Or(c.Listen, ListenDefault)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return &daemon.SettingError{Component: "api", Field: "Listen", Flag: "listen", Value: addr, Want: "host:port, such as " + ListenDefault}
	}
	if c.InsecureNoAuth && !loopback(host) {
		return &daemon.SettingError{Component: "api", Field: "InsecureNoAuth", Flag: "insecure-no-auth", Value: addr,
			Want: "used only on a loopback address (127.0.0.1, ::1, localhost): anyone who reaches the address could run and cancel workflows"}
	}
	for _, d := range []struct {
		field, flag string
		v, def      time.Duration
	}{
		{"WaitMax", "", c.WaitMax, WaitMaxDefault},
		{"ReadHeaderTimeout", "", c.ReadHeaderTimeout, ReadHeaderTimeoutDefault},
		{"ReadTimeout", "", c.ReadTimeout, ReadTimeoutDefault},
		{"IdleTimeout", "", c.IdleTimeout, IdleTimeoutDefault},
		{"FailedAuthEvery", "", c.FailedAuthEvery, FailedAuthEveryDefault},
	} {
		if err := daemon.CheckNotNegative("api", d.field, d.flag, d.v, d.def); err != nil {
			return err
		}
	}
	if err := daemon.CheckNotNegative("api", "BodyMax", "", c.BodyMax, BodyMaxDefault); err != nil {
		return err
	}
	return daemon.CheckNotNegative("api", "FailedAuthBurst", "", c.FailedAuthBurst, FailedAuthBurstDefault)
}

// loopback reports whether host (of a listen address) is a loopback
// address or localhost. An empty host (every interface) is not.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withDefaults is c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	c.Listen = cmp.Or(c.Listen, ListenDefault)
	c.BodyMax = cmp.Or(c.BodyMax, BodyMaxDefault)
	c.WaitMax = cmp.Or(c.WaitMax, WaitMaxDefault)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, IdleTimeoutDefault)
	c.FailedAuthBurst = cmp.Or(c.FailedAuthBurst, FailedAuthBurstDefault)
	c.FailedAuthEvery = cmp.Or(c.FailedAuthEvery, FailedAuthEveryDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	return c
}

// anonymous is the token of every request under InsecureNoAuth: its
// actor is auth.ActorAnonymous.
func anonymous() client.Token { return client.Token{Name: "anonymous", Role: auth.RoleAdmin} }
