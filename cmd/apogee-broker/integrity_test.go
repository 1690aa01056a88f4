package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Damage after a clean stop, through the broker binary (issue 14's defects
// 1 and 2, and flipped bytes in the newest segment): the broker is stopped
// with SIGTERM, a file is damaged as an operator or bit rot would, and the
// restarted broker must serve every message it can prove, never a damaged
// one, name what was lost, and never write over the kept records.

const integrityTopic = "Integrity"

// integrityBroker starts the binary on a fresh data directory with 4 queues
// per topic and 16 MiB segments.
func integrityBroker(t *testing.T, bin, data string) *process {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "broker.conf")
	os.WriteFile(conf, []byte("defaultTopicQueueNums=4\nmapedFileSizeCommitLog=16777216\n"), 0o644)
	return start(t, bin, "--namesrv-listen", "", "--data-dir", data, "--config", conf)
}

func integrityBody(i int) string { return fmt.Sprintf("msg-%05d-%s", i, strings.Repeat("b", 300)) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sendIntegrity sends n messages round-robin to queues 0..3, message i to
// queue i%4.
func sendIntegrity(t *testing.T, addr string, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := client.NewProducer(client.NameServer(addr), client.Selector(client.ManualSelector()), client.Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	for i := from; i < from+n; i++ {
		q := client.MessageQueue{Topic: integrityTopic, BrokerName: core.DefaultBrokerName, QueueID: int32(i % 4)}
		if _, err := prod.SendSync(ctx, &client.Message{Topic: integrityTopic, Queue: &q, Keys: []string{fmt.Sprint("key-", i)}, Body: []byte(integrityBody(i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// pullIntegrity pulls the topic's 4 queues from offset 0 until queue q has
// served want[q] messages, then once more to see that nothing else comes, and
// returns the bodies per queue, in queue order.
func pullIntegrity(t *testing.T, addr string, want [4]int) [4][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := client.NewPullConsumer(client.NameServer(addr), client.ConsumerGroup(fmt.Sprint("check-", time.Now().UnixNano())),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.AutoCommit(false), client.Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	var qs []client.MessageQueue
	for i := int32(0); i < 4; i++ {
		qs = append(qs, client.MessageQueue{Topic: integrityTopic, BrokerName: core.DefaultBrokerName, QueueID: i})
	}
	if err := cons.Assign(ctx, qs); err != nil {
		t.Fatal(err)
	}
	var out [4][]string
	done := func() bool {
		for q := range out {
			if len(out[q]) < want[q] {
				return false
			}
		}
		return true
	}
	for extra := 0; extra < 2; {
		if done() {
			extra++ // one more poll: nothing beyond what is expected may come
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		msgs, err := cons.Poll(pctx)
		pcancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll: %v", err)
		}
		for _, m := range msgs {
			out[m.Queue.QueueID] = append(out[m.Queue.QueueID], string(m.Body))
		}
		if ctx.Err() != nil {
			t.Fatalf("pulled %d/%d/%d/%d messages, want %v", len(out[0]), len(out[1]), len(out[2]), len(out[3]), want)
		}
	}
	return out
}

// recordOffsets walks a commit-log segment file and returns the offset of
// each record in it.
func recordOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := 0; off < len(b); {
		v, err := message.Decode(b[off:], true)
		if err != nil {
			break
		}
		offs = append(offs, int64(off))
		off += int(v.TotalSize())
	}
	return offs
}

// checkServed pulls the topic and asserts that each queue serves exactly the
// messages (by number, of n sent) that want accepts, in order.
func checkServed(t *testing.T, addr string, want func(i int) bool, n int) {
	t.Helper()
	var exp [4][]string
	var counts [4]int
	for i := 0; i < n; i++ {
		if want(i) {
			exp[i%4] = append(exp[i%4], integrityBody(i))
			counts[i%4]++
		}
	}
	got := pullIntegrity(t, addr, counts)
	for q := 0; q < 4; q++ {
		if len(got[q]) != len(exp[q]) {
			t.Fatalf("queue %d served %d messages, want %d", q, len(got[q]), len(exp[q]))
		}
		for k := range exp[q] {
			if got[q][k] != exp[q][k] {
				t.Fatalf("queue %d message %d is %.9q, want %.9q", q, k, got[q][k], exp[q][k])
			}
		}
	}
}

// Defect 1: a shortened commit-log segment used to wipe the log.
func TestRestartAfterShortenedSegment(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	const n = 3000
	p := integrityBroker(t, bin, data)
	sendIntegrity(t, p.addr, 0, n)
	p.stop(t, syscall.SIGTERM)

	seg := filepath.Join(data, "commitlog", "00000000000000000000")
	offs := recordOffsets(t, seg)
	// The topic's messages follow whatever the broker itself wrote first.
	first := len(offs) - n
	if first < 0 {
		t.Fatalf("%d records in the segment, want at least %d", len(offs), n)
	}
	cut := offs[first+2000] + 100
	if err := os.Truncate(seg, cut); err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(seg)

	p = integrityBroker(t, bin, data)
	defer p.stop(t, syscall.SIGTERM)
	checkServed(t, p.addr, func(i int) bool { return i < 2000 }, n)
	logs := p.RunLog()
	for _, want := range []string{"commit log range lost", "store: messages lost", fmt.Sprintf("from=%d", offs[first+2000])} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the loss is not reported (%q missing):\n%s", want, logs)
		}
	}
	// New messages go after the kept records, never over them.
	sendIntegrity(t, p.addr, n, 4)
	now, _ := os.ReadFile(seg)
	if len(now) < len(kept) || string(now[:offs[first+2000]]) != string(kept[:offs[first+2000]]) {
		t.Fatal("the kept records were written over")
	}
}

// Defect 2: a damaged or shortened consume queue used to hide messages.
func TestRestartAfterDamagedConsumeQueue(t *testing.T) {
	bin := buildBinary(t)
	const n = 2000
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"200 bytes overwritten at offset 2,000", func(path string) error {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte(strings.Repeat("\x5a", 200)), 2000)
			return err
		}},
		{"cut to 4,000 bytes", func(path string) error { return os.Truncate(path, 4000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			p := integrityBroker(t, bin, data)
			sendIntegrity(t, p.addr, 0, n)
			p.stop(t, syscall.SIGTERM)
			if err := tc.damage(filepath.Join(data, "consumequeue", integrityTopic, "1", "00000000000000000000")); err != nil {
				t.Fatal(err)
			}
			p = integrityBroker(t, bin, data)
			defer p.stop(t, syscall.SIGTERM)
			checkServed(t, p.addr, func(int) bool { return true }, n)
			if !strings.Contains(p.RunLog(), "rebuilding it from the commit log") {
				t.Fatalf("the rebuild is not reported:\n%s", p.RunLog())
			}
		})
	}
}

// Bytes flipped in the middle of the newest segment after a clean stop: the
// damaged message is never served, every other one is.
func TestRestartAfterFlippedBytesInNewestSegment(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	const n = 2000
	p := integrityBroker(t, bin, data)
	sendIntegrity(t, p.addr, 0, n)
	p.stop(t, syscall.SIGTERM)
	seg := filepath.Join(data, "commitlog", "00000000000000000000")
	offs := recordOffsets(t, seg)
	bad := offs[len(offs)-n+1000]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("\xff\xfe\xfd\xfc"), bad+200) // inside the body
	f.Close()

	p = integrityBroker(t, bin, data)
	defer p.stop(t, syscall.SIGTERM)
	checkServed(t, p.addr, func(i int) bool { return i != 1000 }, n)
	if !strings.Contains(p.RunLog(), fmt.Sprintf("topic=%s queue=0 fromQueueOffset=250 toQueueOffset=250 count=1", integrityTopic)) {
		t.Fatalf("the lost message is not named:\n%s", p.RunLog())
	}
}

// Defect 5: disk-full refusals and disk-pressure deletions were silent. On a
// small tmpfs filled by a ballast file, sends are refused (code 14) with one
// WARN line, the cleaner deletes old segments early with a WARN line each
// naming the range, and writes are accepted again with one WARN line.
// Needs permission to mount a tmpfs (root); skipped otherwise.
//
// Deterministic at any speed. The cleaner runs every 10 s whatever the
// sends' pace; on a loaded machine it used to free segments (early, for the
// full disk) faster than the sends filled them, so a segment could always
// be allocated and no send was ever refused. Now the disk is topped up to
// full before every send until one is refused: what the cleaner frees
// meanwhile is taken back at once, and the next segment allocation fails.
// The top-up is then removed, handing the broker what the cleaner freed
// by then (on a fast machine nothing: the cleaner's next pass makes the
// room). The bodies are 32 KiB: a few hundred sends fill a segment, and the
// consume queue never needs another block, so dispatch never pauses and
// every segment but the newest is the cleaner's to delete.
func TestDiskFullIsLogged(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=96m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	bin := buildBinary(t)
	data := filepath.Join(mnt, "data")
	conf := filepath.Join(t.TempDir(), "broker.conf")
	os.WriteFile(conf, []byte("defaultTopicQueueNums=4\nmapedFileSizeCommitLog=8388608\nmaxMessageSize=65536\ndiskMaxUsedSpaceRatio=75\n"), 0o644)
	p := start(t, bin, "--namesrv-listen", "", "--data-dir", data, "--config", conf)
	defer p.stop(t, syscall.SIGTERM)

	ctx, cancel := context.WithTimeout(context.Background(), 2*wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()
	// Uncompressed 32 KiB bodies: a few hundred sends fill a segment. No
	// retries, and timeouts that only a hung broker reaches: a send that
	// fails is a refusal, or the test fails.
	prod, err := client.NewProducer(client.NameServer(p.addr), client.Selector(client.ManualSelector()),
		client.Logger(quietLogger()), client.SendRetries(0), client.CompressOver(-1),
		client.SendTimeout(wait.DefaultTimeout), client.RequestTimeout(wait.DefaultTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	q := client.MessageQueue{Topic: integrityTopic, BrokerName: core.DefaultBrokerName, QueueID: 0}
	body := bytes.Repeat([]byte("d"), 32<<10)
	// send reports whether the broker stored the message (false: it refused
	// it for lack of space, SERVICE_NOT_AVAILABLE); any other failure fails
	// the test.
	send := func() bool {
		_, err := prod.SendSync(ctx, &client.Message{Topic: integrityTopic, Queue: &q, Body: body})
		var be *client.BrokerError
		switch {
		case err == nil:
			return true
		case errors.As(err, &be) && be.Code == protocol.RespServiceNotAvailable:
			return false
		case ctx.Err() != nil:
			t.Fatalf("the test's bound passed: %v", ctx.Err())
		default:
			t.Fatalf("send: %v", err)
		}
		return false
	}
	for range 18 << 20 / len(body) { // about 18 MiB: two sealed segments
		if !send() {
			t.Fatal("a send refused before the disk is full")
		}
	}

	// Fill the rest of the disk; free it before the broker stops (deferred
	// calls run last in, first out), or its shutdown cannot write its state.
	chunk := make([]byte, 1<<16)
	fill := func(f *os.File) {
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("fill %s: %v", f.Name(), err)
				}
				return
			}
		}
	}
	create := func(name string) *os.File {
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ballast := create("ballast")
	defer os.Remove(ballast.Name())
	fill(ballast)
	ballast.Close()
	topUp := create("top-up")
	defer os.Remove(topUp.Name())
	defer topUp.Close()

	// Sends, back to back (the load that fills the segment, so that the next
	// one cannot be allocated), each after the disk is topped up to full,
	// until one is refused.
	refused := 0
	for refused == 0 {
		fill(topUp)
		if !send() {
			refused++
		}
	}
	// Hand back what the cleaner freed before the refusal, if it ran by then.
	topUp.Close()
	if err := os.Remove(topUp.Name()); err != nil {
		t.Fatal(err)
	}
	// Refused while the disk is full, until the cleaner's early deletions
	// make room; then one is accepted.
	wait.For(t, "a send accepted again", func() error {
		if !send() {
			refused++
			return fmt.Errorf("%d sends refused", refused)
		}
		return nil
	})
	// The broker logs before it answers: the last line expected is in its
	// log by now, or about to be. The cleaner logs its deletions after the
	// files are gone: a send may be accepted before that line is written.
	p.AwaitLog("accepting writes again")
	logs := p.AwaitLog("deleted before its retention time")
	if c := strings.Count(logs, "refusing writes"); c != 1 {
		t.Fatalf("%d 'refusing writes' lines for %d refused sends, want 1:\n%s", c, refused, logs)
	}
	if !strings.Contains(logs, "deleted before its retention time") || !strings.Contains(logs, "from=0 to=8388608") {
		t.Fatalf("the early deletion is not logged with its range:\n%s", logs)
	}
	if c := strings.Count(logs, "accepting writes again"); c != 1 {
		t.Fatalf("%d 'accepting writes again' lines, want 1:\n%s", c, logs)
	}
	info := runtimeInfo(t, p.addr)
	if info["diskFullRefusals"] == "0" || info["diskPressureSegmentDeletes"] == "0" {
		t.Fatalf("runtime info: refusals %s, pressure deletes %s", info["diskFullRefusals"], info["diskPressureSegmentDeletes"])
	}
}
