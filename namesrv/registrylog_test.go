package namesrv

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/internal/wait"
)

// lockedBuffer is a log sink that tests read while the registry writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(ln, substr) {
			out = append(out, ln)
		}
	}
	return out
}

// The log says which registrations a name server received and which are
// only the process's own broker entered in its own route table (a broker
// process that serves no name server logged "embedded=true" there).
func TestRegistrationLogSaysWhereItCameFrom(t *testing.T) {
	var buf lockedBuffer
	s := startServer(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	s.r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "own", BrokerAddr: "10.0.0.9:10911"})
	own := buf.lines("broker=own")
	if len(own) != 1 || !strings.Contains(own[0], "this process's broker entered in its own route table") {
		t.Fatalf("the in-process registration logged %q", own)
	}
	g := NewRegistrar([]string{s.addr}, newPool(t), newSource().get, nil)
	g.Start()
	t.Cleanup(func() { closeRegistrar(t, g) })
	wait.Until(t, "the remote registration logged", func() bool { return len(buf.lines("namesrv: broker registered")) > 0 })
	if remote := buf.lines("namesrv: broker registered")[0]; strings.Contains(remote, "own route table") {
		t.Fatalf("the remote registration is logged as the process's own: %q", remote)
	}
	if all := buf.lines("embedded"); len(all) != 0 {
		t.Fatalf("registration lines still speak of an embedded name server: %q", all)
	}
}
