package cli

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
)

// tokenCommand is `ffctl token`: the HTTP API's tokens.
func tokenCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "token",
		Usage:     "create, list and revoke the HTTP API's tokens (ffctl daemon api)",
		UsageText: "ffctl token create|list|revoke [command options] [arguments...]\n\nExample:\n  ffctl token create ci --role operator --expires 90d\n  ffctl token revoke ci --reason 'leaked in a build log'",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "make a token and print its secret, once (only its hash is stored)",
				UsageText: "ffctl token create NAME --role viewer|operator|admin [--expires D] [-o json]\n\n" +
					"viewer reads runs, tasks, DEAD tasks, workflows and events; operator also triggers, cancels,\n" +
					"requeues and sends events; admin also applies workflow files. The secret (ffk_...) is\n" +
					"printed on standard output and never again: send it as Authorization: Bearer SECRET. NAME\n" +
					"is spelt as a workflow name and is never reused, also once revoked.\n\n" +
					"Example:\n  ffctl token create billing --role operator --expires 90d",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "role", Usage: "viewer, operator or admin (required)"},
					&cli.StringFlag{Name: "expires", Usage: "the token expires this long after now (database clock): 90d, 12h, 1d12h; default never"},
					outputFlag(),
				},
				Action: func(c *cli.Context) error { return tokenCreate(c, env) },
			},
			{
				Name:      "list",
				Usage:     "list tokens with their role, expiry and revocation (never a secret)",
				UsageText: "ffctl token list [-o json]\n\nExample:\n  ffctl token list -o json",
				Flags:     []cli.Flag{outputFlag()},
				Action:    func(c *cli.Context) error { return tokenList(c, env) },
			},
			{
				Name:  "revoke",
				Usage: "revoke a token: the API refuses it from its next request on (audited)",
				UsageText: "ffctl token revoke NAME --reason R [-o json]\n\n" +
					"Who, when and why are recorded with the token (ffctl token list shows them).\n\n" +
					"Example:\n  ffctl token revoke ci --reason 'leaked in a build log'",
				Flags:  []cli.Flag{reasonFlag(requiredReason("why")), outputFlag()},
				Action: func(c *cli.Context) error { return tokenRevoke(c, env) },
			},
		},
	}
}

// tokenName is the one argument of a token command: the token's name.
func tokenName(c *cli.Context, verb string) (string, error) {
	if c.NArg() != 1 {
		return "", usageError("token %s takes one argument, the token's name (got %d)", verb, c.NArg())
	}
	name := c.Args().First()
	if err := auth.ValidateName(name); err != nil {
		return "", usageError("%v", err)
	}
	return name, nil
}

func tokenCreate(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := tokenName(c, "create")
	if err != nil {
		return err
	}
	role, err := auth.ParseRole(c.String("role"))
	if err != nil {
		return usageError("--role: %v", err)
	}
	var opts client.TokenOptions
	if c.IsSet("expires") {
		if opts.ExpiresIn, err = parseAge(c.String("expires")); err != nil {
			return usageError("--expires %v (leave the flag out for a token that never expires)", err)
		}
	}
	t, err := withClient(c, client.Options{Actor: actor()}, func(ctx context.Context, cl *client.Client) (client.CreatedToken, error) {
		return cl.CreateToken(ctx, name, role, opts)
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, t)
	}
	fmt.Fprintln(env.Stdout, t.Secret)
	expires := "never expires"
	if t.ExpiresAt != nil {
		expires = "expires " + fmtTime(t.ExpiresAt)
	}
	fmt.Fprintf(env.Stderr, "token %s (%s, %s): the secret above is shown this once; send it as Authorization: Bearer SECRET\n", t.Name, t.Role, expires)
	return nil
}

func tokenList(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("token list takes no arguments")
	}
	ts, err := withClient(c, client.Options{}, func(ctx context.Context, cl *client.Client) ([]client.Token, error) { return cl.ListTokens(ctx) })
	if err != nil {
		return err
	}
	if format == "json" {
		if ts == nil {
			ts = []client.Token{}
		}
		return writeJSON(env.Stdout, ts)
	}
	tw := newTable(env.Stdout, env.colours(), "NAME", "ROLE", "CREATED", "BY", "EXPIRES", "STATUS")
	for _, t := range ts {
		status := "active"
		switch {
		case t.RevokedAt != nil:
			status = fmt.Sprintf("revoked %s by %s: %s", fmtTime(t.RevokedAt), *t.RevokedBy, firstLine(t.RevokeReason, 60))
		case t.Expired:
			status = "expired"
		}
		tw.row(t.Name, string(t.Role), fmtTime(&t.CreatedAt), t.CreatedBy, fmtTime(t.ExpiresAt), status)
	}
	return tw.flush()
}

func tokenRevoke(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	name, err := tokenName(c, "revoke")
	if err != nil {
		return err
	}
	reason, err := auditReason(c, env, bufio.NewReader(env.Stdin), "revoke", "why the token is revoked")
	if err != nil {
		return err
	}
	t, err := withClient(c, client.Options{}, func(ctx context.Context, cl *client.Client) (client.Token, error) {
		return cl.RevokeToken(ctx, name, client.ActionOptions{Reason: reason, Actor: actor()})
	})
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, t)
	}
	fmt.Fprintf(env.Stdout, "token %s revoked: the API refuses it from its next request on\n", strings.TrimSpace(t.Name))
	return nil
}
