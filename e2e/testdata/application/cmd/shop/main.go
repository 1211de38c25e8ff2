// Command shop is an application that starts a FlowForge run in the same
// transaction as its own write: order 42 is inserted and its fulfilment
// triggered, then committed; order 43 likewise, then rolled back. It waits
// for the run of order 42 and prints it as JSON (e2e:
// TestAnApplicationOutsideTheRepositoryTriggersInItsTransaction).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowforge/flowforge/core/client"
)

// Order is the params of a fulfil run.
type Order struct {
	OrderID int `json:"order_id"`
	Amount  int `json:"amount"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("FLOWFORGE_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	c := client.New(pool, client.Options{Actor: "shop"})
	defer c.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, amount int NOT NULL)`); err != nil {
		return err
	}
	committed, err := order(ctx, pool, c, Order{OrderID: 42, Amount: 1250}, true)
	if err != nil {
		return err
	}
	if _, err := order(ctx, pool, c, Order{OrderID: 43, Amount: 99}, false); err != nil {
		return err
	}
	r, err := c.Wait(ctx, committed.String(), client.WaitOptions{})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// order inserts o and triggers its fulfilment in one transaction, which it
// commits or rolls back.
func order(ctx context.Context, pool *pgxpool.Pool, c *client.Client, o Order, commit bool) (fmt.Stringer, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, o.OrderID, o.Amount); err != nil {
		return nil, err
	}
	res, err := c.TriggerTx(ctx, tx, "fulfil", o, client.TriggerOptions{IdempotencyKey: fmt.Sprintf("order-%d", o.OrderID)})
	if err != nil {
		return nil, err
	}
	if !commit {
		return res.RunID, tx.Rollback(ctx)
	}
	return res.RunID, tx.Commit(ctx)
}
