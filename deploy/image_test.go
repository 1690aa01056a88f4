package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/wait"
)

// imageTestEnv turns TestImage on: building the image compiles four
// static binaries with flags of their own (-trimpath, CGO_ENABLED=0),
// which the build cache shares with nothing else the suite builds, so a
// cold run costs a minute or more on two cores.
const imageTestEnv = "APOGEE_IMAGE_TEST"

// commandTimeout bounds every container command the test runs but the
// build (a cold build compiles the binaries).
const commandTimeout = 2 * time.Minute

// containerRuntime is how this machine runs the image: the tool (podman
// or docker), its global flags (podman's --runtime), and the flags every
// run needs here (resource limits the runtime may set).
type containerRuntime struct {
	tool   string
	global []string
	run    []string
}

// command is the tool with its global flags and args, bounded in time.
func (r containerRuntime) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.tool, append(append([]string(nil), r.global...), args...)...)
}

// output runs the tool and returns its standard output, or an error with
// both outputs.
func (r containerRuntime) output(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := r.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", r.tool, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// runArgs are `run` with the flags this machine needs, then args.
func (r containerRuntime) runArgs(args ...string) []string {
	return append(append([]string{"run"}, r.run...), args...)
}

// remove removes a container at once, running or not (podman's rm would
// first wait for its stop timeout; docker's -f kills).
func (r containerRuntime) remove(name string) {
	args := []string{"rm", "-f", name}
	if r.tool == "podman" {
		args = []string{"rm", "-f", "-t", "0", name}
	}
	_, _ = r.output(args...)
}

func (r containerRuntime) String() string {
	return strings.Join(append(append([]string{r.tool}, r.global...), r.run...), " ")
}

// limitFlags are the resource limits every run is given: the runtimes'
// defaults (podman: 1048576 open files) may exceed what this process may
// raise them to (no CAP_SYS_RESOURCE, as in some VMs), which makes every
// start fail. The file limit is this process's own (at most 65536), the
// process limit one the test's few goroutines stay far below.
func limitFlags() []string {
	nofile := uint64(65536)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < nofile {
		nofile = rl.Cur
	}
	n := strconv.FormatUint(nofile, 10)
	return []string{"--ulimit", "nofile=" + n + ":" + n, "--ulimit", "nproc=4096:4096"}
}

// candidates are the ways to run containers this machine may offer, in
// the order tried: podman with its configured OCI runtime, podman with
// runc (crun refuses hosts with cgroups in hybrid mode, where runc
// works), docker (with a running daemon).
func candidates() []containerRuntime {
	var out []containerRuntime
	limits := limitFlags()
	if _, err := exec.LookPath("podman"); err == nil {
		out = append(out, containerRuntime{tool: "podman", run: limits})
		if _, err := exec.LookPath("runc"); err == nil {
			out = append(out, containerRuntime{tool: "podman", global: []string{"--runtime", "runc"}, run: limits})
		}
	}
	if _, err := exec.LookPath("docker"); err == nil {
		out = append(out, containerRuntime{tool: "docker", run: limits})
	}
	return out
}

// repoRoot is the repository's top directory (this package's parent).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// buildImage builds the image under tag with scripts/build-image.sh and
// the given tool; it removes the image when the test ends.
func buildImage(t *testing.T, r containerRuntime, tag string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "build-image.sh"), "-t", tag)
	cmd.Env = append(os.Environ(), "CONTAINER_TOOL="+r.tool)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/build-image.sh with %s: %w\n%s", r.tool, err, out)
	}
	t.Cleanup(func() { _, _ = r.output("rmi", "-f", tag) })
	return nil
}

// findRuntime builds the image and returns the first candidate that runs
// it (apogee-broker --version), or why none does.
func findRuntime(t *testing.T, tag string) (containerRuntime, error) {
	t.Helper()
	var reasons []string
	built := map[string]bool{}
	for _, r := range candidates() {
		if _, err := r.output("info"); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s info fails (no daemon, or not set up): %v", r.tool, firstLine(err)))
			continue
		}
		if !built[r.tool] {
			if err := buildImage(t, r, tag); err != nil {
				return r, err // a runtime that works and an image that does not build: the test's failure
			}
			built[r.tool] = true
		}
		out, err := r.output(r.runArgs("--rm", tag, "apogee-broker", "--version")...)
		if err == nil && strings.HasPrefix(out, "apogee-broker ") {
			return r, nil
		}
		reasons = append(reasons, fmt.Sprintf("%s cannot run the image: %v", r, err))
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "neither podman nor docker is installed (Debian: apt-get install podman)")
	}
	return containerRuntime{}, &noRuntimeError{reasons}
}

// noRuntimeError says why no container runtime runs the image here.
type noRuntimeError struct{ reasons []string }

func (e *noRuntimeError) Error() string {
	return "no container runtime works on this machine:\n  " + strings.Join(e.reasons, "\n  ")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// container is one detached container of the test.
type container struct {
	r    containerRuntime
	name string
}

// startBroker runs apogee-broker from the image on the host's network
// (every listener on 127.0.0.1 from port 0), its data directory and ready
// file on the host directory data (mounted at /data), and waits for the
// ready file.
func startBroker(t *testing.T, r containerRuntime, tag, name, data string) (*container, readyfile.File) {
	t.Helper()
	ready := filepath.Join(data, "ready.json")
	args := r.runArgs("-d", "--name", name, "--network", "host", "-v", data+":/data:Z", tag,
		"apogee-broker", "--data-dir", "/data/broker", "--ready-file", "/data/ready.json",
		"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0",
		"--grpc-listen", "", "--metrics-listen", "127.0.0.1:0")
	if _, err := r.output(args...); err != nil {
		t.Fatal(err)
	}
	c := &container{r: r, name: name}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, c.logs())
		}
		r.remove(name)
	})
	var f readyfile.File
	wait.For(t, name+"'s ready file", func() error {
		if !c.running() {
			t.Fatalf("%s exited before it was ready:\n%s", name, c.logs())
		}
		var err error
		if f, err = readyfile.Read(ready); err != nil {
			return err
		}
		if f.PID != 1 {
			return fmt.Errorf("%s is of pid %d, not the container's process (1)", ready, f.PID)
		}
		return nil
	})
	return c, f
}

func (c *container) running() bool {
	out, err := c.r.output("inspect", "-f", "{{.State.Running}}", c.name)
	return err == nil && strings.TrimSpace(out) == "true"
}

func (c *container) logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := c.r.command(ctx, "logs", c.name).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s logs: %v)\n%s", c.r.tool, err, out)
	}
	return string(out)
}

// stop stops the container as an orchestrator does (SIGTERM, then SIGKILL
// after the grace) and returns its exit code.
func (c *container) stop(t *testing.T) int {
	t.Helper()
	if _, err := c.r.output("stop", "-t", "30", c.name); err != nil {
		t.Fatal(err)
	}
	out, err := c.r.output("inspect", "-f", "{{.State.ExitCode}}", c.name)
	if err != nil {
		t.Fatal(err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("exit code %q: %v", out, err)
	}
	return code
}

// TestImage builds the image (scripts/build-image.sh) and runs it: a
// broker from it answers /healthz and a send of the Go client; the
// image's apogee-admin finds the message; SIGTERM stops the broker with
// status 0 ("stopped cleanly"); a new container on the same volume
// serves the message again. Needs APOGEE_IMAGE_TEST=1 and podman or
// docker that can run containers here; skipped, saying why, otherwise.
func TestImage(t *testing.T) {
	if os.Getenv(imageTestEnv) != "1" {
		t.Skipf("set %s=1 to build the container image and run it (podman or docker; a cold build compiles the binaries: a minute or more)", imageTestEnv)
	}
	tag := fmt.Sprintf("localhost/apogee-image-test:%d", os.Getpid())
	r, err := findRuntime(t, tag)
	var none *noRuntimeError
	if errors.As(err, &none) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("running the image with %s", r)

	data := t.TempDir()
	// The image's user (65532) writes the volume.
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(data, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	name := fmt.Sprintf("apogee-image-test-%d", os.Getpid())
	c, ready := startBroker(t, r, tag, name, data)

	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + ready.Metrics + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	p, err := client.NewProducer(client.NameServer(ready.Namesrv), client.ProducerGroup("image-test"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.SendSync(ctx, &client.Message{Topic: "ImageTest", Body: []byte("from outside the container")})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close(ctx)
	id := res.MsgID()

	// The image's own apogee-admin finds it (through the name server).
	query := func(namesrv string) {
		t.Helper()
		out, err := r.output(r.runArgs("--rm", "--network", "host", tag,
			"apogee-admin", "queryMsgByUniqueKey", "-n", namesrv, "-t", "ImageTest", "-i", id)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, id) || !strings.Contains(out, "from outside the container") {
			t.Fatalf("apogee-admin queryMsgByUniqueKey does not show message %s:\n%s", id, out)
		}
	}
	query(ready.Namesrv)

	if code := c.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0:\n%s", code, c.logs())
	}
	if logs := c.logs(); !strings.Contains(logs, "stopped cleanly") {
		t.Fatalf("no \"stopped cleanly\" after SIGTERM:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(data, "ready.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ready file outlived the broker: %v", err)
	}
	r.remove(name)

	// A new container on the same volume has the message.
	_, ready = startBroker(t, r, tag, name+"-again", data)
	query(ready.Namesrv)
}
