//go:build ffnoclient

package main

import (
	"context"
	"fmt"
)

// clientMode stands in for client.go in a tree without core/client
// (before issue 25): -mode tx and many are refused.
func clientMode(_ context.Context, o options) (result, error) {
	return result{}, fmt.Errorf("-mode %s needs core/client, which this tree has not", o.mode)
}
