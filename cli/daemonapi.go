package cli

// This file holds the flags of `ffctl daemon api` and of the API in
// `ffctl daemon all` (--api-listen).

import (
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// apiListenFlag names the API's address flag of role: --listen for
// `daemon api`, --api-listen for `daemon all` (where it also turns the
// API on).
func apiListenFlag(role supervisor.Role) string {
	if role == supervisor.RoleAPI {
		return "listen"
	}
	return "api-listen"
}

// apiFlags are the HTTP API's flags of role (api or all).
func apiFlags(role supervisor.Role) []cli.Flag {
	listen := &cli.StringFlag{Name: "listen", Usage: "api: host:port of the HTTP API (/v1); a port taken exits 1", Value: api.ListenDefault, EnvVars: []string{"FLOWFORGE_API_LISTEN"}}
	if role != supervisor.RoleAPI {
		listen = &cli.StringFlag{Name: "api-listen", Usage: "api: serve the HTTP API (/v1) on this host:port too (default: none)", EnvVars: []string{"FLOWFORGE_API_LISTEN"}}
	}
	return []cli.Flag{
		listen,
		&cli.StringFlag{Name: "tls-cert", Usage: "api: PEM certificate file: serve HTTPS only (with --tls-key)", EnvVars: []string{"FLOWFORGE_API_TLS_CERT"}},
		&cli.StringFlag{Name: "tls-key", Usage: "api: PEM private key file of --tls-cert", EnvVars: []string{"FLOWFORGE_API_TLS_KEY"}},
		&cli.BoolFlag{Name: "insecure-no-auth", Usage: "api: serve every route without a token, as api:anonymous with the admin role (refused unless the address is loopback)", EnvVars: []string{"FLOWFORGE_API_INSECURE_NO_AUTH"}},
	}
}

// apiConfig maps role's API flags to the API's Config (its settings are
// checked by the supervisor's Validate).
func apiConfig(c *cli.Context, role supervisor.Role) api.Config {
	return api.Config{
		Listen:         c.String(apiListenFlag(role)),
		TLSCert:        c.String("tls-cert"),
		TLSKey:         c.String("tls-key"),
		InsecureNoAuth: c.Bool("insecure-no-auth"),
	}
}
