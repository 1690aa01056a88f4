package benchmark

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/auth"
)

// TestTLSAndCredentials runs e2e against the embedded broker over TLS with
// signed requests: every connection is TLS, every request is checked by
// the broker's access control and allowed, and messages go end to end.
func TestTLSAndCredentials(t *testing.T) {
	var out bytes.Buffer
	c := short(ModeE2E)
	c.Out, c.DataDir, c.Rate = &out, t.TempDir(), 2000
	c.TLS = &tls.Config{}
	c.Credentials = auth.Credentials{AccessKey: "bench", SecretKey: "bench-secret"}
	cfg, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tg, err := openTarget(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	res, err := measure(ctx, cfg, tg, cfg.Rate, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages == 0 || res.Errors != 0 || res.Consumed == 0 {
		t.Fatalf("result %+v\n%s", res, out.String())
	}
	if !strings.Contains(res.Config, ", TLS, signed") {
		t.Errorf("the run's description does not say TLS and signed: %q", res.Config)
	}
	bt := tg.(*brokerTarget)
	if st := bt.tlsServer.Stats(); st.TLSConns == 0 || st.PlainConns != 0 || st.HandshakeFailures != 0 {
		t.Errorf("connections to the embedded broker: %+v, want TLS only", st)
	}
	if st := bt.guard.Stats(); st.Allowed == 0 || st.Denied != 0 {
		t.Errorf("access control: %+v, want every request checked and allowed", st)
	}

	// TLS and credentials are for connections: store mode refuses them.
	s := short(ModeStore)
	s.TLS = &tls.Config{}
	if _, err := s.withDefaults(); err == nil {
		t.Error("store mode accepted TLS")
	}
}
