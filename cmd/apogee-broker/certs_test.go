package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestExpiredCertificateAtStart (issue 29, case 8): a broker given an
// expired certificate does not start: it exits non-zero with an ERROR
// naming the file and the certificate's dates, before it listens (a
// verifying client could not have used it).
func TestExpiredCertificateAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	f := tlstest.Write(t, t.TempDir())
	notAfter := time.Now().Add(-time.Hour).Truncate(time.Second)
	tlstest.ReissueValid(t, f, notAfter.Add(-48*time.Hour), notAfter)
	p := proctest.New(t, "apogee-broker", buildBinary(t))
	if err := p.Launch(withListeners([]string{"--data-dir", filepath.Join(t.TempDir(), "data"),
		"--tls-mode", "enforcing", "--tls-cert", f.ServerCert, "--tls-key", f.ServerKey})...); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the broker to exit", func() error {
		select {
		case <-p.Done():
			return nil
		default:
			return errors.New("running")
		}
	})
	if code := p.ExitCode(); code == 0 {
		t.Fatalf("the broker exited 0 with an expired certificate:\n%s", p.RunLog())
	}
	logs := p.RunLog()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "not valid now") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, f.ServerCert) || !strings.Contains(line, "not_after="+notAfter.UTC().Format(time.RFC3339)) {
		t.Fatalf("no ERROR naming %s and its end %s:\n%s", f.ServerCert, notAfter.UTC().Format(time.RFC3339), logs)
	}
	if strings.Contains(logs, "listening on") || p.Stdout() != "" {
		t.Errorf("the broker reported listening:\n%s\n%s", p.Stdout(), logs)
	}
}
