// Package crashtest runs a test binary's child test in a separate process,
// reads what it prints, and SIGKILLs it: the harness of the storage engine's
// crash tests. The child prints "ready" once it is set up, then one line per
// acknowledged operation; the parent kills it a given time after "ready" and
// receives every complete line the child printed before it died.
package crashtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Ready is the line a child prints once it is set up.
const Ready = "ready"

// KillAfter starts `<test binary> -test.run=^child$` with env added to the
// environment, SIGKILLs it `after` its Ready line, and passes each line the
// child printed (but Ready) to onLine, in order. It fails the test if the
// child exits by itself or is not ready within startTimeout.
func KillAfter(t *testing.T, child string, env []string, after, startTimeout time.Duration, onLine func(string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var kill <-chan time.Time
	deadline := time.After(startTimeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("crash child %s exited before it was killed: %s", child, stderr.String())
			}
			if line == Ready {
				kill, deadline = time.After(after), nil
				continue
			}
			onLine(line)
		case <-kill:
			cmd.Process.Kill() // SIGKILL
			for line := range lines {
				onLine(line)
			}
			cmd.Wait()
			return
		case <-deadline:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("crash child %s not ready within %v: %s", child, startTimeout, stderr.String())
		}
	}
}
