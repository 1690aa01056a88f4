package benchmark

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// System calls and context switches per message.
//
// Beside the CPU clocks (cpu.go) the harness reads, at the same two moments
// and for the same processes, four counters the kernel keeps, and divides
// their advance by the same messages:
//
//   - syscr and syscw of /proc/PID/io: the read-like and write-like system
//     calls of the process, all its threads, those that exited included (the
//     kernel adds an exiting thread's counts to its thread group's). The
//     kernel counts a call in syscr when it goes through the VFS read paths
//     (read, readv, pread64, preadv and preadv2) and in syscw through the
//     write paths (write, writev, pwrite64, pwritev and pwritev2);
//     sendfile and copy_file_range count in both, splice in neither. Socket
//     reads and writes by read, write and writev are counted (that is how
//     Go's net package does TCP); recvmsg, sendmsg, recvfrom and sendto are
//     not, nor is anything else: epoll_wait, epoll_pwait, futex, nanosleep,
//     sched_yield, madvise, mmap, msync, fdatasync, fsync, io_uring. (On
//     Linux 6.18: read and write on files and sockets, their positioned and
//     vector forms, sendfile, copy_file_range, splice, the socket message
//     calls and fdatasync were checked against the counters.) Linux keeps no per-process total of all system
//     calls: perf (scripts/bench-syscalls.sh, root) counts them all by kind.
//     The file needs the right to ptrace the process (same user, or root)
//     and a kernel built with CONFIG_TASK_IO_ACCOUNTING; without them the
//     figures are null and kernel_note says why.
//   - voluntary_ctxt_switches and nonvoluntary_ctxt_switches: how often a
//     thread gave up its CPU to wait (a futex, epoll_wait, a page fault's
//     I/O) and how often it was preempted. /proc/PID/status shows only the
//     thread group leader's, so for another process the harness reads
//     /proc/PID/task/TID/status of every thread and sums each thread's
//     advance; a thread that exits during the measured part takes its
//     switches with it (Go's runtime exits a thread only when a goroutine
//     locked to it ends, so this is rare; kernel_note counts such threads).
//     For this process getrusage(RUSAGE_SELF) gives ru_nvcsw and ru_nivcsw,
//     which cover every thread, exited ones included.
//
// The reader's own reads of /proc count among the generator's system calls
// (a few dozen per run), never the broker's. With the broker in this process
// (the in-process embedded broker, store mode) the figures are the whole
// process's, broker and generator together, as CPU is: a goroutine runs on
// whichever thread is free, so the process's threads cannot be split into
// the broker's and the generator's.

// procRoot is where the harness reads the kernel's process files.
const procRoot = "/proc"

// ioCounts are the system call counts of /proc/PID/io.
type ioCounts struct {
	syscr, syscw int64
}

// switches are a thread's (or a process's) context switches.
type switches struct {
	vol, nonvol int64
}

// kernelCounts are a process's counters at one moment. sw holds each
// thread's switches by thread id; for this process one entry, 0, from
// getrusage.
type kernelCounts struct {
	io    ioCounts
	ioErr error
	sw    map[int]switches
	swErr error
}

// KernelPerMsg are a process's kernel counters per message of the measured
// part (see kernel.go). A field is null when its file could not be read
// (Result.KernelNote says why).
type KernelPerMsg struct {
	// SyscR and SyscW: read-like and write-like system calls, syscr and
	// syscw of /proc/PID/io.
	SyscR *float64 `json:"syscr"`
	SyscW *float64 `json:"syscw"`
	// VoluntaryCtxtSwitches and NonvoluntaryCtxtSwitches: the context
	// switches of all the process's threads.
	VoluntaryCtxtSwitches    *float64 `json:"voluntary_ctxt_switches"`
	NonvoluntaryCtxtSwitches *float64 `json:"nonvoluntary_ctxt_switches"`
}

// parseIO reads syscr and syscw from the text of a /proc/PID/io file.
func parseIO(b []byte) (ioCounts, error) {
	r, w, err := parseTwo(b, "syscr", "syscw")
	if err != nil {
		return ioCounts{}, err
	}
	return ioCounts{syscr: r, syscw: w}, nil
}

// parseSwitches reads voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// from the text of a /proc/PID/task/TID/status file.
func parseSwitches(b []byte) (switches, error) {
	v, n, err := parseTwo(b, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
	if err != nil {
		return switches{}, err
	}
	return switches{vol: v, nonvol: n}, nil
}

// parseTwo reads the integer values of keys k1 and k2 from "key: value"
// lines (a /proc file's text); both must be there.
func parseTwo(b []byte, k1, k2 string) (v1, v2 int64, err error) {
	var have1, have2 bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case k1:
			dst, have1 = &v1, true
		case k2:
			dst, have2 = &v2, true
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", k, err)
		}
		*dst = n
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !have1 || !have2 {
		return 0, 0, fmt.Errorf("no %s and %s", k1, k2)
	}
	return v1, v2, nil
}

// readIO reads process pid's system call counts under root.
func readIO(root string, pid int) (ioCounts, error) {
	f := filepath.Join(root, strconv.Itoa(pid), "io")
	b, err := os.ReadFile(f)
	if err != nil {
		return ioCounts{}, fmt.Errorf("benchmark: system calls: %w", err)
	}
	c, err := parseIO(b)
	if err != nil {
		return ioCounts{}, fmt.Errorf("benchmark: system calls: %s: %w", f, err)
	}
	return c, nil
}

// readThreadSwitches reads the context switches of every thread of process
// pid under root. A thread that exits while it is read is left out.
func readThreadSwitches(root string, pid int) (map[int]switches, error) {
	dir := filepath.Join(root, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("benchmark: context switches: %w", err)
	}
	out := make(map[int]switches, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		f := filepath.Join(dir, t.Name(), "status")
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited since the directory was listed
		}
		if err != nil {
			return nil, fmt.Errorf("benchmark: context switches: %w", err)
		}
		s, err := parseSwitches(b)
		if err != nil {
			return nil, fmt.Errorf("benchmark: context switches: %s: %w", f, err)
		}
		out[tid] = s
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("benchmark: context switches: no thread of process %d could be read", pid)
	}
	return out, nil
}

// procKernelCounts reads process pid's counters under root.
func procKernelCounts(root string, pid int) kernelCounts {
	var k kernelCounts
	k.io, k.ioErr = readIO(root, pid)
	k.sw, k.swErr = readThreadSwitches(root, pid)
	return k
}

// selfKernelCounts reads this process's counters; ru is its getrusage.
func selfKernelCounts(ru *syscall.Rusage) kernelCounts {
	var k kernelCounts
	k.io, k.ioErr = readIO(procRoot, os.Getpid())
	if ru == nil {
		k.swErr = errors.New("benchmark: context switches: getrusage failed")
	} else {
		k.sw = map[int]switches{0: {vol: ru.Nvcsw, nonvol: ru.Nivcsw}}
	}
	return k
}

// switchDelta is the switches of the threads of after since before: a
// thread's own advance, or all its switches when it is new (a thread id
// absent before, or whose counts went down: the id was reused). exited
// counts the threads of before absent from after.
func switchDelta(before, after map[int]switches) (d switches, exited int) {
	for tid, a := range after {
		b, ok := before[tid]
		if !ok || a.vol < b.vol || a.nonvol < b.nonvol {
			b = switches{}
		}
		d.vol += a.vol - b.vol
		d.nonvol += a.nonvol - b.nonvol
	}
	for tid := range before {
		if _, ok := after[tid]; !ok {
			exited++
		}
	}
	return d, exited
}

// kernelPerMsg is the advance from k0 to k1 per message, for the process
// named who; notes gathers why a figure is missing.
func kernelPerMsg(who string, k0, k1 kernelCounts, msgs int64, notes *[]string) *KernelPerMsg {
	per := func(n int64) *float64 {
		v := float64(n) / float64(msgs)
		return &v
	}
	var r KernelPerMsg
	if err := errors.Join(k0.ioErr, k1.ioErr); err != nil {
		*notes = append(*notes, fmt.Sprintf("%s system calls unknown: %v", who, firstErr(k0.ioErr, k1.ioErr)))
	} else {
		r.SyscR, r.SyscW = per(k1.io.syscr-k0.io.syscr), per(k1.io.syscw-k0.io.syscw)
	}
	if err := errors.Join(k0.swErr, k1.swErr); err != nil {
		*notes = append(*notes, fmt.Sprintf("%s context switches unknown: %v", who, firstErr(k0.swErr, k1.swErr)))
	} else {
		d, exited := switchDelta(k0.sw, k1.sw)
		r.VoluntaryCtxtSwitches, r.NonvoluntaryCtxtSwitches = per(d.vol), per(d.nonvol)
		if exited > 0 {
			*notes = append(*notes, fmt.Sprintf("%d %s threads exited during the measured part: their switches are not counted", exited, who))
		}
	}
	return &r
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// kernelLines are the summary's lines of system calls and context switches
// per message.
func kernelLines(r *Result) []string {
	what := "acknowledged"
	if r.Mode == ModeConsume {
		what = "consumed"
	}
	f := func(p *float64) string {
		if p == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.3f", *p)
	}
	pair := func(k *KernelPerMsg, calls bool) string {
		if k == nil {
			return "unknown"
		}
		if calls {
			return f(k.SyscR) + " + " + f(k.SyscW)
		}
		return f(k.VoluntaryCtxtSwitches) + " + " + f(k.NonvoluntaryCtxtSwitches)
	}
	var out []string
	for _, calls := range []bool{true, false} {
		head := fmt.Sprintf("context switches per %s message (voluntary + involuntary, all threads)", what)
		if calls {
			head = fmt.Sprintf("system calls per %s message (read-like + write-like: syscr + syscw of /proc/PID/io)", what)
		}
		switch {
		case r.ProcessKernel != nil:
			out = append(out, fmt.Sprintf("%s: %s for broker and generator together", head, pair(r.ProcessKernel, calls)))
		case r.ClientKernel != nil:
			out = append(out, fmt.Sprintf("%s: broker %s, client %s", head, pair(r.BrokerKernel, calls), pair(r.ClientKernel, calls)))
		}
	}
	if len(out) > 0 && r.KernelNote != "" {
		out = append(out, "("+r.KernelNote+")")
	}
	return out
}
