package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/remoting"
)

// TestBadACLFileLoggedOnce (issue 29, case 16): an ACL file that stops
// loading, checked every 2 s, is logged once (a WARN naming the file and
// what to do), not at each check; the rules in force stay; when it loads
// again one line counts the failed checks that were not logged.
func TestBadACLFileLoggedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(secACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	replace := func(text string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"), "--acl-file", file)
	defer p.stop(t, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, p.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})

	replace("users: [\n")
	wait.For(t, "three failed checks of the file", func() error {
		if n := atoi(runtimeInfoAs(t, cl, root)["aclReloadErrors"]); n < 3 {
			return fmt.Errorf("aclReloadErrors %d", n)
		}
		return nil
	})
	logs := p.RunLog()
	if n := strings.Count(logs, "the ACL file does not load"); n != 1 {
		t.Fatalf("%d lines for one bad file over three checks, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "fix the file") {
		t.Errorf("the line should be a WARN saying what to do:\n%s", logs)
	}

	replace(secACLFile + "\n# fixed\n")
	logs = p.AwaitLog("the ACL file loads again")
	m := regexp.MustCompile(`the ACL file loads again.* failed_checks_not_logged=(\d+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no count in the line that says the file loads again:\n%s", logs)
	}
	if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("failed_checks_not_logged=%d, want at least 2 (three or more checks failed, one was logged)", n)
	}
}
