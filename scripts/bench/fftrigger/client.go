//go:build !ffnoclient

package main

// This file is fftrigger's -mode tx and -mode many: runs created through
// core/client, the way an application does, so that each tree's own client
// is what is measured. A tree without core/client (before issue 25) builds
// fftrigger with -tags ffnoclient, which swaps in noclient.go.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowforge/flowforge/core/client"
)

// clientMode runs -mode tx or many on a pgx pool of its own (-loops + 2
// connections) and a client.Client over it:
//
//	tx    each call is a transaction of the caller's: begin, -app-insert
//	      (the application's own write), client.TriggerTx, commit
//	many  each call is one client.TriggerMany of -batch runs; -n runs in
//	      all (a multiple of -batch), one call at a time
//
// -warm calls per loop go first, untimed; the result's Seconds and LatMS
// are the timed calls' (closedloop.go).
func clientMode(ctx context.Context, o options) (result, error) {
	cfg, err := pgxpool.ParseConfig(o.db)
	if err != nil {
		return result{}, fmt.Errorf("pool: %w", err)
	}
	cfg.MaxConns = int32(o.loops + 2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, fmt.Errorf("pool: %w", err)
	}
	defer pool.Close()
	c := client.New(pool, client.Options{Actor: "bench"})
	defer c.Close()
	load := closedLoad{Loops: o.loops, Warm: o.warm, N: o.n, Window: o.duration}
	perCall := 1
	var call func(context.Context) error
	switch o.mode {
	case "tx":
		if o.appInsert == "" {
			return result{}, errors.New("-mode tx needs -app-insert")
		}
		call = func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, o.appInsert); err != nil {
					return fmt.Errorf("application insert: %w", err)
				}
				_, err := c.TriggerTx(ctx, tx, o.workflow, nil, client.TriggerOptions{})
				return err
			})
		}
	case "many":
		if o.batch <= 0 || o.n%o.batch != 0 {
			return result{}, fmt.Errorf("-mode many: -n %d is not a multiple of -batch %d", o.n, o.batch)
		}
		perCall, load.N, load.Loops = o.batch, o.n/o.batch, 1
		params := make([]any, o.batch) // nil params: {} each
		call = func(ctx context.Context) error {
			_, err := c.TriggerMany(ctx, o.workflow, params, client.TriggerManyOptions{})
			return err
		}
	default:
		return result{}, fmt.Errorf("unknown -mode %q", o.mode)
	}
	r := runClosedLoop(ctx, load, call)
	return result{Triggered: r.Calls * int64(perCall), Errors: r.Errors, FirstError: r.FirstError,
		Seconds: r.Seconds, LatMS: r.LatMS}, nil
}
