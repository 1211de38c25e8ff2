// Command shop-worker is ffctl with the shop's two handlers: a program
// outside the FlowForge repository building its worker (e2e:
// TestAnApplicationOutsideTheRepositoryTriggersInItsTransaction).
package main

import (
	"context"
	"fmt"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
)

// ChargeArgs are the charge task's own params (the workflow file's
// `params:`, rendered from the run's).
type ChargeArgs struct {
	OrderID  string `json:"order_id"`
	Currency string `json:"currency"`
}

// ChargeResult is what the charge task records.
type ChargeResult struct {
	Charged  string `json:"charged"`
	Currency string `json:"currency"`
	Attempt  int    `json:"attempt"`
}

// ShipArgs are read from the run's params, as the trigger gave them.
type ShipArgs struct {
	OrderID int `json:"order_id"`
	Amount  int `json:"amount"`
}

// ShipResult is what the ship task records.
type ShipResult struct {
	Shipped int    `json:"shipped"`
	Label   string `json:"label"`
}

func charge(_ context.Context, t core.Task, a ChargeArgs) (ChargeResult, error) {
	return ChargeResult{Charged: "order " + a.OrderID, Currency: a.Currency, Attempt: t.Attempt}, nil
}

func ship(_ context.Context, _ core.Task, a ShipArgs) (ShipResult, error) {
	return ShipResult{Shipped: a.OrderID, Label: fmt.Sprintf("%d cents", a.Amount)}, nil
}

func main() {
	reg := core.NewRegistry()
	reg.MustRegister("charge", core.TypedHandler(charge))
	reg.MustRegister("ship", core.TypedRunHandler(ship))
	cli.Main(reg)
}
