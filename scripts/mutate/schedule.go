package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/flowforge/flowforge/e2e/mutation"
)

// exclusive reports whether m must run with no other mutant beside it:
// its kill tests include ./e2e, whose daemons, private services and
// deadlines must not share the two cores with another mutant's build.
func exclusive(m mutation.Mutant) bool {
	for _, k := range m.Kill {
		if k.Pkg == "./e2e" || strings.HasPrefix(k.Pkg, "./e2e/") {
			return true
		}
	}
	return false
}

// runAll runs every mutant through one(job, i, m), which returns the line
// to print and the verdict ("killed", "SURVIVED", "BROKEN"). The mutants
// that are not exclusive run first, jobs at a time; job (0 to jobs-1) says
// which of the jobs runs m, so that no two mutants running at once share
// a job's resources (its database: see jobDatabase); the exclusive ones
// then run one by one, as job 0. Lines are written to out as mutants
// finish, whole; the verdicts come back in catalogue order.
func runAll(ctx context.Context, ms []mutation.Mutant, jobs int, one func(job, i int, m mutation.Mutant) (line, verdict string), out io.Writer) []string {
	verdicts := make([]string, len(ms))
	var mu sync.Mutex
	do := func(job, i int) {
		line, verdict := one(job, i, ms[i])
		mu.Lock()
		defer mu.Unlock()
		verdicts[i] = verdict
		fmt.Fprint(out, line)
	}
	var shared, alone []int
	for i, m := range ms {
		if exclusive(m) {
			alone = append(alone, i)
		} else {
			shared = append(shared, i)
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for job := range min(jobs, max(len(shared), 1)) {
		wg.Go(func() {
			for i := range next {
				do(job, i)
			}
		})
	}
	for _, i := range shared {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, i := range alone {
		if ctx.Err() != nil {
			break
		}
		do(0, i)
	}
	for i := range verdicts {
		if verdicts[i] == "" {
			verdicts[i] = "not run"
		}
	}
	return verdicts
}
