package supervisor

import "testing"

// TestMainPoolSize: the main pool is DBMaxConnsDefault, plus the worker's
// Concurrency (or its default), at most WorkerConnsMax, in a process that
// runs a worker, whose handlers and claims share it; a size given is used
// as it is.
func TestMainPoolSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role        Role
		given, conc int
		want        int
	}{
		{RoleScheduler, 0, 0, 10},
		{RolePublisher, 0, 0, 10},
		{RoleWorker, 0, 0, 20},
		{RoleWorker, 0, 4, 14},
		{RoleAll, 0, 32, 20},
		{RoleWorker, 5, 32, 5},
	} {
		c := Config{Role: tc.role, DBMaxConns: tc.given}
		c.Worker.Concurrency = tc.conc
		if got := c.dbMaxConns(); got != tc.want {
			t.Errorf("%s with DBMaxConns %d, Concurrency %d: pool of %d, want %d", tc.role, tc.given, tc.conc, got, tc.want)
		}
	}
}
