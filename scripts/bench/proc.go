package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process the driver started, reaped in the background so that
// it never lingers as a zombie. Its stdout and stderr go to a log file.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startChild starts cmd with its output appended to logPath (its standard
// output only when cmd.Stdout is not set already); the process
// dies with the driver (Pdeathsig) so an interrupted run leaves nothing.
func startChild(name string, cmd *exec.Cmd, logPath string) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	cmd.Stderr = f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the outcome is in cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to grace, then SIGKILLs the child and what is left
// of its descendants (found through /proc before the signal).
func (c *child) stop(sig syscall.Signal, grace time.Duration) {
	if c.exited() {
		return
	}
	desc := descendants(c.pid())
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	for _, d := range desc {
		if alive(d) {
			_ = syscall.Kill(d, syscall.SIGKILL)
		}
	}
}

// cpuSeconds returns the CPU seconds (user+system) of an exited child,
// from its rusage. (Its ru_maxrss is no peak RSS of the child: Linux starts
// it from the parent's at the fork, so peakRSS reads /proc instead.)
func (c *child) cpuSeconds() (float64, error) {
	if !c.exited() {
		return 0, fmt.Errorf("%s: still running", c.name)
	}
	ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, errors.New("no rusage on this platform")
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime), nil
}

// peakRSS is the running child's peak resident set so far (VmHWM of
// /proc/PID/status), in bytes; 0 when it cannot be read.
func (c *child) peakRSS() int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid()) + "/status")
	if err != nil {
		return 0
	}
	return parseVmHWM(string(b))
}

// parseVmHWM reads the "VmHWM: N kB" line of /proc/PID/status, in bytes.
func parseVmHWM(status string) int64 {
	for _, l := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// tail returns the last n lines of the child's log.
func (c *child) tail(n int) string { return tailFile(c.log, n) }

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStat is the part of /proc/PID/stat the driver reads.
type procStat struct {
	state byte
	ppid  int
	// ticks are utime+stime; childTicks cutime+cstime (reaped children).
	ticks, childTicks int64
}

// clockTicks is USER_HZ, 100 on every Linux the driver runs on.
const clockTicks = 100

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 15 {
		return procStat{}, false
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	return procStat{state: f[0][0], ppid: int(num(1)), ticks: num(11) + num(12), childTicks: num(13) + num(14)}, true
}

func alive(pid int) bool {
	st, ok := readProcStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

// descendants lists the live descendants of root, from /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.state != 'Z' {
			kids[st.ppid] = append(kids[st.ppid], pid)
		}
	}
	var out []int
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, k := range kids[queue[0]] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// treeCPU is the CPU seconds used so far by root, its live descendants and
// every child it has reaped: a counter that only grows, so the difference of
// two readings is what the tree spent in between.
func treeCPU(root int) float64 {
	st, ok := readProcStat(root)
	if !ok {
		return 0
	}
	ticks := st.ticks + st.childTicks
	for _, d := range descendants(root) {
		if s, ok := readProcStat(d); ok {
			ticks += s.ticks + s.childTicks
		}
	}
	return float64(ticks) / clockTicks
}
