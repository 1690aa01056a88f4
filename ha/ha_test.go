package ha

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// TestReplicate100kMessages: 100,000 messages over 50 topics, put while a
// slave streams; the slave's log is byte-identical to the master's, its
// consume queues hold the same entries and its pulls return the same records.
func TestReplicate100kMessages(t *testing.T) {
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	m, addr := startMaster(t, master, MasterOptions{BatchSize: 256 << 10})
	defer m.Close()
	s := startSlave(t, replica, addr, SlaveOptions{})
	defer s.Close()

	put(t, master, 100_000, 50, 4, "a")
	caughtUp(t, master, replica)
	if master.LogMinOffset() != 0 || replica.LogMinOffset() != 0 {
		t.Fatalf("log minimums: master %d, replica %d", master.LogMinOffset(), replica.LogMinOffset())
	}
	if segs := master.WrittenOffset() / master.SegmentSize(); segs < 10 {
		t.Fatalf("only %d segments: the test should cross many segment ends", segs)
	}
	sameLog(t, master, replica, 0, master.WrittenOffset())
	if n := sameQueues(t, master, replica, false); n != 100_000 {
		t.Fatalf("%d entries compared, want 100000", n)
	}
	sameMessages(t, master, replica)
	vs, err := replica.QueryByKey("topic-7", "a-key-99957", 0, time.Now().UnixMilli()+1000, 4, nil)
	if err != nil || len(vs) != 1 {
		t.Fatalf("query by key on the replica: %d, %v", len(vs), err)
	}
	vs[0].Release()

	st := s.Status()
	if !st.Connected || st.Received != master.WrittenOffset() || st.Resets != 0 {
		t.Fatalf("slave status: %+v", st)
	}
	wait.Until(t, "the master to see the last acknowledgement", func() bool {
		sl := m.Slaves()
		return len(sl) == 1 && sl[0].Acked == master.WrittenOffset() && sl[0].Sent == master.WrittenOffset()
	})
	if _, err := replica.Put(&store.Message{Topic: "T", Body: []byte("x"), BornHost: born}); err == nil {
		t.Fatal("the replica accepted a put")
	}
}

// TestRestartResumes restarts the slave, then the master (on a new port):
// each time replication resumes from the slave's offset, without starting
// over.
func TestRestartResumes(t *testing.T) {
	mdir, rdir := t.TempDir(), t.TempDir()
	var logs logBuffer
	master := openStore(t, storeOptions(mdir))
	m, addr := startMaster(t, master, MasterOptions{Logger: logs.logger(t, "master")})
	replica := openStore(t, replicaOptions(rdir))
	s := startSlave(t, replica, addr, SlaveOptions{Logger: logs.logger(t, "slave")})

	put(t, master, 5000, 10, 2, "one")
	caughtUp(t, master, replica)

	// The slave stops; the master goes on; the slave comes back.
	s.Close()
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	put(t, master, 5000, 10, 2, "two")
	replica = openStore(t, replicaOptions(rdir))
	resumeAt := replica.WrittenOffset()
	s = startSlave(t, replica, addr, SlaveOptions{Logger: logs.logger(t, "slave")})
	caughtUp(t, master, replica)
	if got := s.Status().Received; got != master.WrittenOffset()-resumeAt {
		t.Fatalf("the slave received %d bytes, want the %d it lacked", got, master.WrittenOffset()-resumeAt)
	}
	// The master logs the catch-up of what the slave lacked when it
	// reconnected.
	lacked := fmt.Sprintf(" bytes=%d ", master.WrittenOffset()-resumeAt)
	wait.Until(t, "the master's catch-up line", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "ha: slave caught up with the log it lacked when it connected") && strings.Contains(line, lacked) {
				return true
			}
		}
		return false
	})

	// The master stops and comes back on another port.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the slave to notice", func() bool { return !s.Status().Connected })
	master = openStore(t, storeOptions(mdir))
	defer master.Close()
	m, addr = startMaster(t, master, MasterOptions{Logger: logs.logger(t, "master")})
	defer m.Close()
	s.SetMasterAddr(addr)
	put(t, master, 5000, 10, 2, "three")
	caughtUp(t, master, replica)
	defer replica.Close()
	defer s.Close()

	sameLog(t, master, replica, 0, master.WrittenOffset())
	if n := sameQueues(t, master, replica, false); n != 15000 {
		t.Fatalf("%d entries, want 15000", n)
	}
	if st := s.Status(); st.Resets != 0 || st.Sessions < 2 {
		t.Fatalf("slave status: %+v", st)
	}
	if out := logs.String(); strings.Contains(out, "starts over") || strings.Contains(out, "level=ERROR") {
		t.Fatalf("unexpected log lines:\n%s", out)
	}
}

// TestSlaveBelowMinimumStartsOver: retention on the master removed what a
// stopped slave needs next; when it comes back, the master says so and
// streams from its oldest segment, and the slave sets its log aside and
// starts over there.
func TestSlaveBelowMinimumStartsOver(t *testing.T) {
	mo := storeOptions(t.TempDir())
	mo.RetentionTime = time.Millisecond
	master := openStore(t, mo)
	defer master.Close()
	var mlog, slog logBuffer
	m, addr := startMaster(t, master, MasterOptions{Logger: mlog.logger(t, "master")})
	defer m.Close()
	rdir := t.TempDir()
	replica := openStore(t, replicaOptions(rdir))
	s := startSlave(t, replica, addr, SlaveOptions{Logger: slog.logger(t, "slave")})
	put(t, master, 2000, 5, 1, "old")
	caughtUp(t, master, replica)
	oldEnd := replica.WrittenOffset()
	s.Close()
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}

	put(t, master, 30000, 5, 2, "new")
	wait.Until(t, "dispatch", func() bool { return master.DispatchedOffset() == master.WrittenOffset() })
	wait.For(t, "retention to remove the old segments", func() error { // once older than RetentionTime
		n, err := master.Clean()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return errors.New("nothing removed")
		}
		return nil
	})
	min := master.LogMinOffset()
	if min <= oldEnd {
		t.Fatalf("the master's minimum %d is not beyond the slave's end %d", min, oldEnd)
	}

	replica = openStore(t, replicaOptions(rdir))
	defer replica.Close()
	s = startSlave(t, replica, addr, SlaveOptions{Logger: slog.logger(t, "slave")})
	defer s.Close()
	caughtUp(t, master, replica)
	if replica.LogMinOffset() != min {
		t.Fatalf("the replica's log starts at %d, the master's at %d", replica.LogMinOffset(), min)
	}
	sameLog(t, master, replica, min, master.WrittenOffset())
	if n := sameQueues(t, master, replica, true); n == 0 {
		t.Fatal("no queue entries compared")
	}
	sameMessages(t, master, replica)
	if st := s.Status(); st.Resets != 1 {
		t.Fatalf("slave status: %+v", st)
	}
	if out := mlog.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "below the master's oldest retained offset") {
		t.Fatalf("the master did not warn:\n%s", out)
	}
	out := slog.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "starts over") {
		t.Fatalf("the slave did not warn:\n%s", out)
	}
	// The old log was set aside, not deleted.
	matches, _ := filepath.Glob(filepath.Join(rdir, "commitlog", "discarded", "*", "00000000000000000000"))
	if len(matches) != 1 {
		t.Fatalf("old log not set aside: %v\n%s", matches, out)
	}
}

// TestSlaveAheadRefused: a slave whose log is longer than the master's is
// refused with an ERROR line on the master, and keeps its log.
func TestSlaveAheadRefused(t *testing.T) {
	rdir := t.TempDir()
	// Give the replica's directory a log of its own first.
	pre := openStore(t, storeOptions(rdir))
	put(t, pre, 200, 2, 1, "diverged")
	end := pre.WrittenOffset()
	if err := pre.Close(); err != nil {
		t.Fatal(err)
	}
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	put(t, master, 10, 2, 1, "short")
	var mlog, rlog logBuffer
	m, addr := startMaster(t, master, MasterOptions{Logger: mlog.logger(t, "master")})
	defer m.Close()
	replica := openStore(t, replicaOptions(rdir))
	defer replica.Close()
	s := startSlave(t, replica, addr, SlaveOptions{Logger: rlog.logger(t, "slave")})
	defer s.Close()
	wait.Until(t, "the master to refuse the slave", func() bool {
		return strings.Contains(mlog.String(), "refusing a slave whose commit log ends beyond the master's")
	})
	wait.Until(t, "the slave to report the refusal", func() bool {
		return strings.Contains(rlog.String(), "closed the connection before sending anything")
	})
	if !strings.Contains(mlog.String(), "level=ERROR") {
		t.Fatalf("not an ERROR:\n%s", mlog.String())
	}
	if replica.WrittenOffset() != end || replica.LogMinOffset() != 0 || s.Status().Resets != 0 || s.Status().Received != 0 {
		t.Fatalf("the refused slave's log changed: end %d (was %d), status %+v", replica.WrittenOffset(), end, s.Status())
	}
	if len(master.Replicas()) != 0 {
		t.Fatalf("a refused slave counts as a replica: %+v", master.Replicas())
	}
}

// TestSlaveRejectsCorruptStream: bytes that fail validation stop the
// session with an ERROR; nothing after them is appended.
func TestSlaveRejectsCorruptStream(t *testing.T) {
	// A fake master: it reads the report and sends garbage.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	var rlog logBuffer
	s := startSlave(t, replica, ln.Addr().String(), SlaveOptions{Logger: rlog.logger(t, "slave")})
	defer s.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	acceptIdentity(t, c, br)
	var rep [ReportSize]byte
	if _, err := io.ReadFull(br, rep[:]); err != nil {
		t.Fatal(err)
	}
	var hdr [HeaderSize]byte
	body := []byte("this is not a commit-log record, but long enough to look at....................................................")
	putHeader(&hdr, 0, len(body))
	c.Write(hdr[:])
	c.Write(body)
	wait.Until(t, "the slave to reject the stream", func() bool {
		return strings.Contains(rlog.String(), "level=ERROR") && strings.Contains(rlog.String(), "invalid replicated data")
	})
	if replica.WrittenOffset() != 0 {
		t.Fatalf("garbage appended: end %d", replica.WrittenOffset())
	}
}

func TestNewRequiresRoles(t *testing.T) {
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	if _, err := NewMaster(replica, MasterOptions{}); err == nil {
		t.Fatal("a master on a replica's store")
	}
	if _, err := NewSlave(master, SlaveOptions{}); err == nil {
		t.Fatal("a slave on a master's store")
	}
}

// TestHeartbeatsAndHousekeeping: an idle connection stays up on heartbeats
// alone; a silent one (stalled both ways) is closed by both sides, and the
// slave reconnects and resumes once the path works again.
func TestHeartbeatsAndHousekeeping(t *testing.T) {
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	var mlog logBuffer
	m, addr := startMaster(t, master, MasterOptions{
		HeartbeatInterval: 40 * time.Millisecond, HousekeepingInterval: 600 * time.Millisecond, Logger: mlog.logger(t, "master"),
	})
	defer m.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	px := newProxy(t, addr)
	s := startSlave(t, replica, px.addr(), SlaveOptions{ReportInterval: 40 * time.Millisecond, HousekeepingInterval: 600 * time.Millisecond})
	defer s.Close()
	put(t, master, 100, 2, 1, "before")
	caughtUp(t, master, replica)

	// Idle for several housekeeping intervals: still the first connection.
	// What is tested is a time: three intervals in which only heartbeats
	// (every 40 ms) keep the connection.
	time.Sleep(3 * 600 * time.Millisecond)
	if st := s.Status(); st.Sessions != 1 || !st.Connected {
		t.Fatalf("an idle connection did not survive on heartbeats: %+v", st)
	}
	if sl := m.Slaves(); len(sl) != 1 {
		t.Fatalf("master's slaves: %+v", sl)
	}

	px.pause(true)
	wait.Until(t, "the master to close the silent connection", func() bool {
		return strings.Contains(mlog.String(), "slave silent for too long")
	})
	wait.Until(t, "the slave to reconnect", func() bool { return s.Status().Sessions >= 2 })
	px.pause(false)
	put(t, master, 100, 2, 1, "after")
	caughtUp(t, master, replica)
	sameLog(t, master, replica, 0, master.WrittenOffset())
}
