package cli

// This file holds the flags of the handler check of `workflow apply` and
// `workflow rollback` (client.CheckHandlers): the handlers a definition
// names that no live worker registers.

import (
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/client"
)

// allowUnknownHandlerFlag is --allow-unknown-handler: store a definition
// naming a handler no live worker registers (with a warning).
func allowUnknownHandlerFlag() cli.Flag {
	return &cli.BoolFlag{Name: "allow-unknown-handler", Usage: "store the definition even if live workers exist and none registers one of its handlers (a warning instead of exit 2)"}
}

// handlerPolicy is the handler check's policy of --allow-unknown-handler
// and --strict (which rollback does not have).
func handlerPolicy(c *cli.Context) client.HandlerPolicy {
	return client.HandlerPolicy{AllowUnknown: c.Bool("allow-unknown-handler"), Strict: c.Bool("strict"), AllowHint: "pass --allow-unknown-handler"}
}
