package tlsconf_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
)

// logBuf is a log destination safe for the watcher's goroutine.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestValidityAtStart: an expired certificate, and one not valid yet, are
// refused by NewServer with a *CertError naming the file and the dates,
// logged at ERROR; so is a client certificate by ClientConfig.Load.
func TestValidityAtStart(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                error
		words               string
	}{
		{"expired", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), tlsconf.ErrCertExpired, "expired at"},
		{"not valid yet", now.Add(24 * time.Hour), now.Add(48 * time.Hour), tlsconf.ErrCertNotYetValid, "not valid before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tlstest.Write(t, t.TempDir())
			tlstest.ReissueValid(t, f, tc.notBefore, tc.notAfter)
			var logs logBuf
			_, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			var ce *tlsconf.CertError
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) {
				t.Fatalf("NewServer: %v, want a *CertError wrapping %v", err, tc.want)
			}
			date := tc.notAfter.UTC().Format(time.RFC3339)
			if tc.want == tlsconf.ErrCertNotYetValid {
				date = tc.notBefore.UTC().Format(time.RFC3339)
			}
			if msg := err.Error(); !strings.Contains(msg, f.ServerCert) || !strings.Contains(msg, tc.words) || !strings.Contains(msg, date) {
				t.Errorf("the error %q should name %s, say %q and give %s", msg, f.ServerCert, tc.words, date)
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, f.ServerCert) || !strings.Contains(l, "not_after=") {
				t.Errorf("no ERROR naming the file and dates:\n%s", l)
			}
			// The same pair as a client certificate.
			_, err = tlsconf.ClientConfig{CAFile: f.CA, CertFile: f.ServerCert, KeyFile: f.ServerKey}.Load()
			if !errors.Is(err, tc.want) {
				t.Errorf("ClientConfig.Load: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestValidityOnReload: a rotation to an expired certificate keeps the
// pair in force (handshakes still get it), logged once at ERROR however
// many checks fail; a valid rotation afterwards is taken.
func TestValidityOnReload(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	var logs logBuf
	s, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey,
		ReloadInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := serve(t, s)
	serial := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	good := serial()
	now := time.Now()
	tlstest.ReissueValid(t, f, now.Add(-48*time.Hour), now.Add(-time.Hour))
	wait.For(t, "10 failed reloads", func() error {
		if n := s.Stats().ReloadErrs; n < 10 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	if got := serial(); got != good {
		t.Errorf("the expired certificate was put in force (serial %s, was %s)", got, good)
	}
	if err := call(t, addr, clientTLS(t, f, false)); err != nil {
		t.Errorf("a verifying client after the expired rotation: %v", err)
	}
	// One line for the expired pair (a check between the key's rename and
	// the certificate's may log the mismatched pair once too).
	if n := strings.Count(logs.String(), "expired at"); n != 1 {
		t.Errorf("%d lines for one expired rotation, want 1 (throttled):\n%s", n, logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "expired at") {
		t.Errorf("the reload's ERROR should say it expired:\n%s", l)
	}
	tlstest.Reissue(t, f)
	wait.For(t, "the valid rotation served", func() error {
		if got := serial(); got == good {
			return errors.New("still the first certificate")
		}
		return nil
	})
}

// TestExpiryWarning: a certificate in force within ExpiryWarning of its
// end is logged at WARN once a day (not at each check), and past its end
// at ERROR.
func TestExpiryWarning(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	now := time.Now()
	tlstest.ReissueValid(t, f, now.Add(-time.Hour), now.Add(10*24*time.Hour))
	var mu sync.Mutex
	var reads atomic.Int64
	clock := now
	tick := func(d time.Duration) {
		mu.Lock()
		clock = clock.Add(d)
		mu.Unlock()
	}
	var logs logBuf
	s, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey,
		ReloadInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: func() time.Time { reads.Add(1); mu.Lock(); defer mu.Unlock(); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count := func(what string) int { return strings.Count(logs.String(), what) }
	if count("expires soon") != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no WARN at start for a certificate 10 days from its end:\n%s", logs.String())
	}
	// Checks go on every 5 ms: still one line until a day has passed.
	tick(time.Hour)
	before := reads.Load()
	wait.For(t, "ten more checks", func() error {
		if n := reads.Load() - before; n < 10 {
			return fmt.Errorf("%d clock reads", n)
		}
		return nil
	})
	if n := count("expires soon"); n != 1 {
		t.Fatalf("%d lines within a day, want 1:\n%s", n, logs.String())
	}
	tick(24 * time.Hour)
	wait.For(t, "the next day's WARN", func() error {
		if n := count("expires soon"); n != 2 {
			return fmt.Errorf("%d lines", n)
		}
		return nil
	})
	tick(10 * 24 * time.Hour)
	wait.For(t, "the ERROR once it has expired", func() error {
		if count("has expired") != 1 {
			return errors.New("not yet")
		}
		return nil
	})
}
