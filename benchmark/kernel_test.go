package benchmark

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The fixtures under testdata/proc are copies of a real /proc/PID/io and
// /proc/PID/task/TID/status with the numbers set: process 4242 has three
// threads (4242, 4250, 4251), process 77 one thread whose status has no
// context switch lines and no io file.
const fixtureRoot = "testdata/proc"

func TestParseIOFixture(t *testing.T) {
	c, err := readIO(fixtureRoot, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if c != (ioCounts{syscr: 1234567, syscw: 765432}) {
		t.Fatalf("counts %+v", c)
	}
	if _, err := readIO(fixtureRoot, 77); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no io file: %v", err)
	}
}

func TestParseIORefusesWhatIsNotIO(t *testing.T) {
	for name, text := range map[string]string{
		"empty":      "",
		"no syscw":   "rchar: 1\nsyscr: 2\n",
		"not number": "syscr: 2\nsyscw: x\n",
		"exponent":   "syscr: 2\nsyscw: 1e3\n",
	} {
		if c, err := parseIO([]byte(text)); err == nil {
			t.Errorf("%s: parsed %+v", name, c)
		}
	}
	// Order and unknown lines do not matter.
	c, err := parseIO([]byte("syscw: 5\nnew_field: 9\nsyscr: 3\n"))
	if err != nil || c != (ioCounts{syscr: 3, syscw: 5}) {
		t.Fatalf("%+v, %v", c, err)
	}
}

// TestThreadSwitchesFixture: every thread's status is read, not only the
// thread group leader's (whose /proc/PID/status shows its own switches).
func TestThreadSwitchesFixture(t *testing.T) {
	sw, err := readThreadSwitches(fixtureRoot, 4242)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]switches{4242: {120, 7}, 4250: {30000, 450}, 4251: {5, 0}}
	if len(sw) != len(want) {
		t.Fatalf("threads %v", sw)
	}
	for tid, s := range want {
		if sw[tid] != s {
			t.Fatalf("thread %d: %+v, want %+v", tid, sw[tid], s)
		}
	}
	leader, err := os.ReadFile(filepath.Join(fixtureRoot, "4242", "status"))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := parseSwitches(leader); err != nil || s != want[4242] {
		t.Fatalf("leader's status: %+v, %v", s, err)
	}
	if _, err := readThreadSwitches(fixtureRoot, 77); err == nil {
		t.Fatal("a status without switch lines was accepted")
	}
	if _, err := readThreadSwitches(fixtureRoot, 99); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no such process: %v", err)
	}
}

func TestSwitchDelta(t *testing.T) {
	before := map[int]switches{1: {10, 1}, 2: {100, 5}, 3: {7, 7}}
	after := map[int]switches{
		1: {15, 1}, // advanced by 5 + 0
		2: {3, 0},  // went down: the id was reused by a new thread
		4: {20, 2}, // new
		// 3 exited
	}
	d, exited := switchDelta(before, after)
	if d != (switches{5 + 3 + 20, 0 + 0 + 2}) || exited != 1 {
		t.Fatalf("delta %+v, exited %d", d, exited)
	}
}

func TestKernelPerMsg(t *testing.T) {
	k0 := kernelCounts{io: ioCounts{100, 50}, sw: map[int]switches{1: {10, 1}}}
	k1 := kernelCounts{io: ioCounts{300, 150}, sw: map[int]switches{1: {30, 3}, 2: {20, 1}}}
	var notes []string
	k := kernelPerMsg("broker", k0, k1, 100, &notes)
	if len(notes) != 0 || *k.SyscR != 2 || *k.SyscW != 1 || *k.VoluntaryCtxtSwitches != 0.4 || *k.NonvoluntaryCtxtSwitches != 0.03 {
		t.Fatalf("%+v, notes %v", k, notes)
	}
	// An unreadable io file leaves the calls null and says why; an exited
	// thread is noted.
	k1.ioErr = os.ErrPermission
	k1.sw = map[int]switches{2: {20, 1}}
	k = kernelPerMsg("broker", k0, k1, 100, &notes)
	if k.SyscR != nil || k.SyscW != nil || k.VoluntaryCtxtSwitches == nil || len(notes) != 2 ||
		!strings.Contains(notes[0], "broker system calls unknown") || !strings.Contains(notes[1], "1 broker threads exited") {
		t.Fatalf("%+v, notes %q", k, notes)
	}
}

// TestSelfCountersAdvance reads this process's counters live: a write to a
// file is a write-like call, and getrusage's switches cover every thread.
func TestSelfCountersAdvance(t *testing.T) {
	k0 := selfKernelCounts(selfUsage())
	if k0.ioErr != nil || k0.swErr != nil {
		t.Fatalf("io %v, switches %v", k0.ioErr, k0.swErr)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	k1 := selfKernelCounts(selfUsage())
	if d := k1.io.syscw - k0.io.syscw; d < 10 {
		t.Fatalf("10 writes advanced syscw by %d", d)
	}
	if d := k1.io.syscr - k0.io.syscr; d < 1 {
		t.Fatalf("reading /proc/self/io advanced syscr by %d", d)
	}
	// The whole process's voluntary switches are at least those of its
	// leader thread, which /proc/self/status shows.
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	leader, err := parseSwitches(b)
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	if ru.Nvcsw < leader.vol {
		t.Fatalf("process %d voluntary switches, leader %d", ru.Nvcsw, leader.vol)
	}
	threads, err := readThreadSwitches(procRoot, os.Getpid())
	if err != nil || len(threads) < 2 {
		t.Fatalf("threads of this process: %v, %v", threads, err)
	}
}

// checkKernelPerMsg fails unless k has every figure, none negative, and
// (sent: the process took part in sending) read-like and write-like calls.
func checkKernelPerMsg(t *testing.T, who string, k *KernelPerMsg, sent bool) {
	t.Helper()
	if k == nil || k.SyscR == nil || k.SyscW == nil || k.VoluntaryCtxtSwitches == nil || k.NonvoluntaryCtxtSwitches == nil {
		t.Fatalf("%s kernel counters per message: %+v", who, k)
	}
	for name, v := range map[string]float64{"syscr": *k.SyscR, "syscw": *k.SyscW, "voluntary": *k.VoluntaryCtxtSwitches, "nonvoluntary": *k.NonvoluntaryCtxtSwitches} {
		if v < 0 {
			t.Fatalf("%s %s per message %f", who, name, v)
		}
	}
	if sent && (*k.SyscR <= 0 || *k.SyscW <= 0) {
		t.Fatalf("%s: no system calls for a run that sent: syscr %f, syscw %f", who, *k.SyscR, *k.SyscW)
	}
}

func TestKernelLines(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	r := &Result{Mode: ModeProduce,
		BrokerKernel: &KernelPerMsg{v(0.25), v(0.125), v(0.5), v(0.01)},
		ClientKernel: &KernelPerMsg{SyscR: v(1), SyscW: v(2)},
		KernelNote:   "client context switches unknown: x"}
	got := strings.Join(kernelLines(r), "\n")
	for _, want := range []string{"system calls per acknowledged message", "broker 0.250 + 0.125, client 1.000 + 2.000",
		"broker 0.500 + 0.010, client unknown + unknown", "(client context switches unknown: x)"} {
		if !strings.Contains(got, want) {
			t.Fatalf("lines lack %q:\n%s", want, got)
		}
	}
	if l := kernelLines(&Result{Mode: ModeConsume, ProcessKernel: &KernelPerMsg{v(1), v(1), v(1), v(1)}}); len(l) != 2 || !strings.Contains(l[0], "consumed") {
		t.Fatalf("in-process lines %q", l)
	}
	if l := kernelLines(&Result{}); len(l) != 0 {
		t.Fatalf("no counters, lines %q", l)
	}
}
