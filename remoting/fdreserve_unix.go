//go:build unix

package remoting

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// unlimitedNoFile stands for a limit too large to matter (RLIM_INFINITY).
const unlimitedNoFile = 1 << 40

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard one if it is lower
// (on failure the soft one stays) and returns the soft one.
func raiseNoFile() (int64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, os.NewSyscallError("getrlimit", err)
	}
	if lim.Cur < lim.Max && runtime.GOOS != "darwin" { // darwin caps it lower than its hard limit says
		want := lim
		want.Cur = lim.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &want) == nil {
			lim = want
		}
	}
	return clampNoFile(lim.Cur), nil
}

// softNoFile is the soft RLIMIT_NOFILE.
func softNoFile() (int64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return clampNoFile(lim.Cur), nil
}

func clampNoFile(v uint64) int64 {
	if v == unix.RLIM_INFINITY || v > unlimitedNoFile {
		return unlimitedNoFile
	}
	return int64(v)
}

// openFDs counts the process's open file descriptors, less the one the
// count itself opens.
func openFDs() (int, error) {
	dir := "/proc/self/fd"
	if runtime.GOOS != "linux" {
		dir = "/dev/fd"
	}
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return max(n-1, 0), nil
}
