package interop

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// The remoting frame, written by hand so the bad-input tests can bend it:
//
//	int32 length (of everything after it) | int32 (serialize type << 24 | header length) | header | body
//
// Header type 0 is JSON (rocketmq-protocol.md §1).

// command is a JSON remoting header.
type command struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`

	Body []byte `json:"-"`
}

func request(code int, ext map[string]string, body []byte) *command {
	return &command{Code: code, Language: "GO", Version: 317, ExtFields: ext, Body: body}
}

// frame encodes a JSON header and a body into one frame.
func frame(header []byte, body []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(body))
	binary.BigEndian.PutUint32(out[0:], uint32(4+len(header)+len(body)))
	binary.BigEndian.PutUint32(out[4:], uint32(len(header))) // type 0 (JSON) in the high byte
	out = append(out, header...)
	return append(out, body...)
}

// rawConn is a plain TCP connection speaking the remoting protocol.
type rawConn struct {
	net.Conn
	opaque int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return &rawConn{Conn: c}
}

// Send writes cmd with a fresh opaque and returns the opaque.
func (c *rawConn) Send(t testing.TB, cmd *command) int32 {
	t.Helper()
	c.opaque++
	cmd.Opaque = c.opaque
	hdr, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(t, frame(hdr, cmd.Body))
	return cmd.Opaque
}

// Write writes raw bytes with a deadline.
func (c *rawConn) Write(t testing.TB, b []byte) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Conn.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// Invoke sends cmd and reads frames until the response with its opaque.
func (c *rawConn) Invoke(t testing.TB, cmd *command) *command {
	t.Helper()
	op := c.Send(t, cmd)
	for {
		resp, err := c.Read(10 * time.Second)
		if err != nil {
			t.Fatalf("request %d: reading the response: %v", cmd.Code, err)
		}
		if resp.Flag&1 == 1 && resp.Opaque == op {
			return resp
		}
	}
}

// Read reads one frame. It never trusts the peer's length beyond 64 MiB.
func (c *rawConn) Read(timeout time.Duration) (*command, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	var lens [8]byte
	if _, err := io.ReadFull(c.Conn, lens[:4]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lens[:4])
	if n < 4 || n > 64<<20 {
		return nil, fmt.Errorf("frame length %d", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.Conn, buf); err != nil {
		return nil, err
	}
	hl := binary.BigEndian.Uint32(buf[:4])
	if typ := hl >> 24; typ != 0 {
		return nil, fmt.Errorf("header type %d, want JSON", typ)
	}
	hl &= 0xFFFFFF
	if int(hl) > len(buf)-4 {
		return nil, fmt.Errorf("header length %d in a %d-byte frame", hl, n)
	}
	var cmd command
	if err := json.Unmarshal(buf[4:4+hl], &cmd); err != nil {
		return nil, fmt.Errorf("response header %q: %w", buf[4:4+hl], err)
	}
	cmd.Body = buf[4+hl:]
	return &cmd, nil
}

// expectClosed reads until the broker closes the connection (EOF or reset),
// failing if it is still open after d. Frames received meanwhile are
// returned (a broker may answer before it closes).
func (c *rawConn) expectClosed(t testing.TB, d time.Duration) []*command {
	t.Helper()
	deadline := time.Now().Add(d)
	var got []*command
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("connection still open %v after bad input", d)
		}
		resp, err := c.Read(left)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection still open %v after bad input", d)
			}
			return got
		}
		got = append(got, resp)
	}
}
