package benchmark

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU per message.
//
// The harness reads two CPU clocks at the start and at the end of the
// measured part of a run and divides their advance by the messages of that
// part (acknowledged; consume mode: consumed):
//
//   - the broker's: utime+stime of the broker process from /proc/<pid>/stat
//     (all its threads, in clock ticks of 10 ms: over a 10 s run of a busy
//     broker the error is well under 1 %). The pid is --broker-pid, or the
//     child broker's (--child-broker), or the process listening on --addr's
//     port on this machine (/proc/net/tcp{,6} gives the socket's inode,
//     /proc/*/fd the process holding it).
//   - the generator's (client): this process's getrusage(RUSAGE_SELF),
//     which excludes a child broker (its CPU is counted in RUSAGE_CHILDREN,
//     and only once it has been waited for).
//
// With an in-process embedded broker (the default without --addr) and in
// store mode the two share one process, and Go cannot attribute CPU time to
// goroutines: the figure is then the whole process's, reported as
// process_cpu_us_per_msg, with broker and client left null.

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// fixed at 100 by the kernel's ABI on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// errNotLocal means the broker is not on this machine.
var errNotLocal = errors.New("benchmark: the broker's address is not on this machine")

// cpuMeter measures CPU per message over the measured part of a run. A nil
// *cpuMeter measures nothing.
type cpuMeter struct {
	brokerPID int    // 0: no broker CPU
	inProcess bool   // the broker (or store) runs in this process
	note      string // why there is no broker figure, when there is none
	started   bool
	ended     bool
	b0, s0    time.Duration // broker and self at the start
	b1, s1    time.Duration // and at the end
	bErr      error
	// The kernel's counters (kernel.go) of the broker and of this process,
	// at the start and at the end.
	bk0, sk0 kernelCounts
	bk1, sk1 kernelCounts
}

// brokerPIDer is a target that knows its broker's process (a child broker).
type brokerPIDer interface {
	brokerPID() int
}

func newCPUMeter(c Config, t target) *cpuMeter {
	m := &cpuMeter{}
	if p, ok := t.(brokerPIDer); ok && p.brokerPID() > 0 {
		m.brokerPID = p.brokerPID()
		return m
	}
	switch {
	case c.BrokerPID > 0:
		m.brokerPID = c.BrokerPID
	case c.Mode == ModeStore:
		m.inProcess, m.note = true, "store mode: the store runs in this process"
	case c.Addr == "":
		m.inProcess, m.note = true, "the embedded broker runs in this process (--child-broker runs it in a child process and measures it apart)"
	default:
		pid, err := pidListeningOn(c.Addr)
		switch {
		case err != nil:
			m.note = fmt.Sprintf("broker CPU unknown: %v (give --broker-pid)", err)
		case pid == os.Getpid():
			m.inProcess, m.note = true, "the broker at --addr is this process"
		default:
			m.brokerPID = pid
		}
	}
	return m
}

// selfUsage is this process's getrusage(RUSAGE_SELF), nil when it fails.
func selfUsage() *syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil
	}
	return &ru
}

// cpuOf is ru's user and system time (0 for nil).
func cpuOf(ru *syscall.Rusage) time.Duration {
	if ru == nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is utime+stime of process pid, all its threads.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("benchmark: broker CPU: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("benchmark: broker CPU: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("benchmark: broker CPU: short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("benchmark: broker CPU: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * clockTick, nil
}

// sample reads the clocks and the counters: the broker's first, then this
// process's, so that reading the broker's files counts in this process's
// system calls of the same interval (at the start and at the end alike).
func (m *cpuMeter) sample() (broker, self time.Duration, bk, sk kernelCounts, err error) {
	if m.brokerPID > 0 {
		broker, err = procCPU(m.brokerPID)
		bk = procKernelCounts(procRoot, m.brokerPID)
	}
	ru := selfUsage()
	return broker, cpuOf(ru), bk, selfKernelCounts(ru), err
}

// begin samples the clocks at the start of the measured part.
func (m *cpuMeter) begin() {
	if m == nil {
		return
	}
	m.b0, m.s0, m.bk0, m.sk0, m.bErr = m.sample()
	m.started, m.ended = true, false
}

// end samples them at its end; only the first call after begin counts.
func (m *cpuMeter) end() {
	if m == nil || !m.started || m.ended {
		return
	}
	var err error
	m.b1, m.s1, m.bk1, m.sk1, err = m.sample()
	m.bErr = errors.Join(m.bErr, err)
	m.ended = true
}

// fill sets res's CPU figures per message for msgs messages.
func (m *cpuMeter) fill(res *Result, msgs int64) {
	if m == nil || !m.ended || msgs <= 0 {
		return
	}
	per := func(d time.Duration) *float64 {
		v := float64(d.Nanoseconds()) / 1e3 / float64(msgs)
		return &v
	}
	var notes []string
	defer func() { res.KernelNote = strings.Join(notes, "; ") }()
	if m.inProcess {
		res.ProcessCPUUsPerMsg = per(m.s1 - m.s0)
		res.ProcessKernel = kernelPerMsg("process", m.sk0, m.sk1, msgs, &notes)
		res.CPUNote = m.note
		return
	}
	res.ClientCPUUsPerMsg = per(m.s1 - m.s0)
	res.ClientKernel = kernelPerMsg("client", m.sk0, m.sk1, msgs, &notes)
	switch {
	case m.brokerPID == 0:
		res.CPUNote = m.note
	case m.bErr != nil:
		res.CPUNote = fmt.Sprintf("broker CPU unknown: %v", m.bErr)
	default:
		res.BrokerCPUUsPerMsg = per(m.b1 - m.b0)
		res.BrokerPID = m.brokerPID
	}
	if m.brokerPID > 0 {
		res.BrokerKernel = kernelPerMsg("broker", m.bk0, m.bk1, msgs, &notes)
	}
}

// pidListeningOn finds the process on this machine listening on addr's
// port. addr is host:port, a list of them separated by ';' (the first
// counts), or a URL such as nats://host:port.
func pidListeningOn(addr string) (int, error) {
	addr, _, _ = strings.Cut(addr, ";")
	if u, err := url.Parse(addr); err == nil && u.Host != "" && u.Scheme != "" {
		addr = u.Host
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("benchmark: address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("benchmark: address %q: port: %w", addr, err)
	}
	if !isLocalHost(host) {
		return 0, fmt.Errorf("%w: %s", errNotLocal, host)
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(f, uint16(port), inodes); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("benchmark: nothing listens on port %d on this machine", port)
	}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		fds, err := os.ReadDir(p + "/fd")
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			link, err := os.Readlink(p + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				return strconv.Atoi(filepath.Base(p))
			}
		}
	}
	return 0, fmt.Errorf("benchmark: no process of this machine visible here holds the socket listening on port %d", port)
}

// listeningInodes adds the inodes of the sockets listening on port in a
// /proc/net/tcp-format file.
func listeningInodes(file string, port uint16, into map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	want := fmt.Sprintf(":%04X", port)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
			continue
		}
		into[fs[9]] = true
	}
	return sc.Err()
}

// isLocalHost says whether host names this machine.
func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return false
		}
		ip = ips[0]
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// cpuLine is the summary's line of CPU per message.
func cpuLine(r *Result) string {
	what := "acknowledged"
	if r.Mode == ModeConsume {
		what = "consumed"
	}
	f := func(p *float64) string {
		if p == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.2f µs", *p)
	}
	var b strings.Builder
	switch {
	case r.ProcessCPUUsPerMsg != nil:
		fmt.Fprintf(&b, "CPU per %s message: %s for broker and generator together", what, f(r.ProcessCPUUsPerMsg))
	case r.ClientCPUUsPerMsg != nil:
		fmt.Fprintf(&b, "CPU per %s message: broker %s", what, f(r.BrokerCPUUsPerMsg))
		if r.BrokerPID > 0 {
			fmt.Fprintf(&b, " (pid %d)", r.BrokerPID)
		}
		fmt.Fprintf(&b, ", client %s", f(r.ClientCPUUsPerMsg))
	default:
		return ""
	}
	if r.CPUNote != "" {
		fmt.Fprintf(&b, " (%s)", r.CPUNote)
	}
	return b.String()
}
