package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

var instanceSeq atomic.Int64

// uniqueInstance gives each test client its own instance (and client ID), so that
// tests do not share connections unless they mean to.
func uniqueInstance(t testing.TB) client.Opt {
	return client.InstanceName(fmt.Sprintf("%s-%d", t.Name(), instanceSeq.Add(1)))
}

func newProducer(t testing.TB, b *fakeBroker, opts ...client.ProducerOpt) *client.Producer {
	t.Helper()
	all := append([]client.ProducerOpt{client.NameServer(b.addr), uniqueInstance(t)}, opts...)
	p, err := client.NewProducer(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestProducerSendSyncRoundTrip(t *testing.T) {
	for _, enc := range []protocol.SerializeType{protocol.SerializeRocketMQ, protocol.SerializeJSON} {
		t.Run(enc.String(), func(t *testing.T) {
			b := newFakeBroker(t)
			p := newProducer(t, b, client.HeaderEncoding(enc))
			msg := &client.Message{Topic: "T", Body: []byte("hello"), Tags: "tagA", Keys: []string{"k1", "k2"},
				Flag: 7, Properties: map[string]string{"color": "blue"}}
			res, err := p.SendSync(ctxT(t), msg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != client.SendOK || res.Queue.Topic != "T" || res.Queue.BrokerName != "broker-a" || res.QueueOffset != 0 {
				t.Fatalf("result %+v", res)
			}
			recs := b.records("T", res.Queue.QueueID)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			v, err := message.Decode(recs[0], true)
			if err != nil {
				t.Fatal(err)
			}
			props := message.ParseProperties(v.Properties())
			want := map[string]string{"TAGS": "tagA", "KEYS": "k1 k2", "color": "blue", "UNIQ_KEY": res.MsgID()}
			for k, w := range want {
				if props[k] != w {
					t.Errorf("property %s = %q, want %q", k, props[k], w)
				}
			}
			if len(res.MsgID()) != 32 || string(v.Body()) != "hello" || v.Flag() != 7 {
				t.Fatalf("msgID %q body %q flag %d", res.MsgID(), v.Body(), v.Flag())
			}
			if _, off, err := message.ParseOffsetMsgID(res.OffsetMsgID()); err != nil || off != v.PhysicalOffset() {
				t.Fatalf("offset msg id %q: %v", res.OffsetMsgID(), err)
			}
			b.mu.Lock()
			got := b.encodings[enc]
			b.mu.Unlock()
			if got == 0 {
				t.Fatalf("no request arrived with header encoding %v", enc)
			}
		})
	}
}

func TestProducerAsyncFutureOneway(t *testing.T) {
	b := newFakeBroker(t)
	p := newProducer(t, b)
	ctx := ctxT(t)
	const n = 500
	var wg sync.WaitGroup
	var failed atomic.Int32
	wg.Add(n)
	for i := 0; i < n; i++ {
		err := p.SendAsync(ctx, &client.Message{Topic: "A", Body: []byte(fmt.Sprint(i))}, func(r client.SendResult, err error) {
			if err != nil || r.Status != client.SendOK {
				failed.Add(1)
			}
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed.Load() != 0 || b.count("A") != n {
		t.Fatalf("%d failed, %d stored", failed.Load(), b.count("A"))
	}
	f, err := p.SendAsyncFuture(ctx, &client.Message{Topic: "A", Body: []byte("future")})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := f.Result(ctx); err != nil || r.MsgID() == "" {
		t.Fatalf("future: %v %v", r, err)
	}
	if err := p.SendOneway(ctx, &client.Message{Topic: "A", Body: []byte("oneway")}); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "oneway message stored", n+2, func() int { return b.count("A") })
}

func TestProducerBatchSplits(t *testing.T) {
	b := newFakeBroker(t)
	p := newProducer(t, b, client.MaxMessageSize(8<<10))
	var msgs []*client.Message
	for i := 0; i < 100; i++ {
		msgs = append(msgs, &client.Message{Topic: "B", Body: bytes.Repeat([]byte{byte(i)}, 1000), Keys: []string{fmt.Sprint(i)}})
	}
	res, err := p.SendBatch(ctxT(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) < 13 {
		t.Fatalf("100 messages of 1 KB under an 8 KiB limit went in %d batches", len(res))
	}
	total := 0
	seen := map[string]bool{}
	for _, r := range res {
		total += r.Messages
		for _, id := range strings.Split(r.MsgID(), ",") {
			seen[id] = true
		}
		recs := b.records("B", r.Queue.QueueID)
		for i := 0; i < r.Messages; i++ {
			v, err := message.Decode(recs[int(r.QueueOffset)+i], true)
			if err != nil {
				t.Fatal(err)
			}
			if !seen[string(v.UniqKey())] {
				t.Fatalf("record without the batch's unique key")
			}
		}
	}
	if total != 100 || len(seen) != 100 || b.count("B") != 100 {
		t.Fatalf("total %d, ids %d, stored %d", total, len(seen), b.count("B"))
	}
	if b.codeCount(protocol.ReqSendBatchMessage) != len(res) {
		t.Fatalf("%d batch requests for %d results", b.codeCount(protocol.ReqSendBatchMessage), len(res))
	}
	if _, err := p.SendBatch(ctxT(t), []*client.Message{{Topic: "B"}, {Topic: "C"}}); !errors.Is(err, client.ErrBadMessage) {
		t.Fatalf("mixed topics: %v", err)
	}
	if _, err := p.SendBatch(ctxT(t), []*client.Message{{Topic: "B", DelayLevel: 2}}); !errors.Is(err, client.ErrBadMessage) {
		t.Fatalf("delayed message in batch: %v", err)
	}
}

func TestSelectors(t *testing.T) {
	b := newFakeBroker(t)
	ctx := ctxT(t)
	t.Run("round robin", func(t *testing.T) {
		p := newProducer(t, b)
		counts := map[int32]int{}
		for i := 0; i < 40; i++ {
			r, err := p.SendSync(ctx, &client.Message{Topic: "RR", Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			counts[r.Queue.QueueID]++
		}
		for q := int32(0); q < 4; q++ {
			if counts[q] != 10 {
				t.Fatalf("round robin counts %v", counts)
			}
		}
	})
	t.Run("hash", func(t *testing.T) {
		p := newProducer(t, b, client.Selector(client.HashSelector()))
		byKey := map[string]int32{}
		for i := 0; i < 60; i++ {
			key := fmt.Sprintf("order-%d", i%6)
			r, err := p.SendSync(ctx, &client.Message{Topic: "H", Body: []byte("x"), ShardingKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if q, ok := byKey[key]; ok && q != r.Queue.QueueID {
				t.Fatalf("key %s went to queues %d and %d", key, q, r.Queue.QueueID)
			}
			byKey[key] = r.Queue.QueueID
		}
	})
	t.Run("manual", func(t *testing.T) {
		p := newProducer(t, b, client.Selector(client.ManualSelector()))
		q := client.MessageQueue{Topic: "M", BrokerName: "broker-a", QueueID: 2}
		r, err := p.SendSync(ctx, &client.Message{Topic: "M", Body: []byte("x"), Queue: &q})
		if err != nil || r.Queue.QueueID != 2 {
			t.Fatalf("%v %v", r, err)
		}
		bad := client.MessageQueue{Topic: "M", BrokerName: "nope", QueueID: 0}
		if _, err := p.SendSync(ctx, &client.Message{Topic: "M", Queue: &bad}); !errors.Is(err, client.ErrQueueNotFound) {
			t.Fatalf("missing queue: %v", err)
		}
	})
	t.Run("custom", func(t *testing.T) {
		p := newProducer(t, b, client.Selector(client.SelectorFunc(func(m *client.Message, qs []client.MessageQueue) int {
			return len(qs) - 1
		})))
		r, err := p.SendSync(ctx, &client.Message{Topic: "C", Body: []byte("x")})
		if err != nil || r.Queue.QueueID != 3 {
			t.Fatalf("%v %v", r, err)
		}
	})
}

func TestRetryOnSystemBusy(t *testing.T) {
	b := newFakeBroker(t)
	var busy atomic.Int32
	busy.Store(2)
	b.setHook(func(req *protocol.Command) (int32, bool) {
		if req.Code == protocol.ReqSendMessage && busy.Add(-1) >= 0 {
			return protocol.RespSystemBusy, true
		}
		return 0, false
	})
	p := newProducer(t, b, client.SystemBusyBackoff(20*time.Millisecond, time.Second))
	start := time.Now()
	r, err := p.SendSync(ctxT(t), &client.Message{Topic: "T", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	// Two busy answers: back-offs of 20 ms and 40 ms.
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Fatalf("retried after %v, before the back-off", el)
	}
	if b.codeCount(protocol.ReqSendMessage) != 3 || r.Status != client.SendOK {
		t.Fatalf("%d send requests, %v", b.codeCount(protocol.ReqSendMessage), r)
	}
	// Always busy: the error is the broker's, after 1 + SendRetries attempts.
	busy.Store(1 << 30)
	_, err = p.SendSync(ctxT(t), &client.Message{Topic: "T", Body: []byte("x")})
	var be *client.BrokerError
	if !errors.As(err, &be) || be.Code != protocol.RespSystemBusy {
		t.Fatalf("always busy: %v", err)
	}
	// Not retryable: MESSAGE_ILLEGAL fails at once.
	before := b.codeCount(protocol.ReqSendMessage)
	b.setHook(func(req *protocol.Command) (int32, bool) {
		return protocol.RespMessageIllegal, req.Code == protocol.ReqSendMessage
	})
	if _, err := p.SendSync(ctxT(t), &client.Message{Topic: "T", Body: []byte("x")}); !errors.As(err, &be) || be.Code != protocol.RespMessageIllegal {
		t.Fatalf("illegal: %v", err)
	}
	if n := b.codeCount(protocol.ReqSendMessage) - before; n != 1 {
		t.Fatalf("non-retryable code tried %d times", n)
	}
}

func TestRetryOtherBrokerAndAvoidIt(t *testing.T) {
	bad := newFakeBroker(t, func(b *fakeBroker) { b.name = "broker-b" })
	a := newFakeBroker(t, func(b *fakeBroker) { b.peers = []*fakeBroker{bad} })
	bad.setHook(func(req *protocol.Command) (int32, bool) {
		return protocol.RespServiceNotAvailable, req.Code == protocol.ReqSendMessage
	})
	p := newProducer(t, a)
	for i := 0; i < 20; i++ {
		r, err := p.SendSync(ctxT(t), &client.Message{Topic: "T", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Queue.BrokerName != "broker-a" {
			t.Fatalf("stored on %s", r.Queue.BrokerName)
		}
	}
	// The failing broker is tried once, then avoided for a while.
	if n := bad.codeCount(protocol.ReqSendMessage); n != 1 {
		t.Fatalf("failing broker got %d sends", n)
	}
	if a.count("T") != 20 {
		t.Fatalf("%d stored", a.count("T"))
	}
}

func TestSendTimeout(t *testing.T) {
	b := newFakeBroker(t)
	b.setHook(func(req *protocol.Command) (int32, bool) { return -1, req.Code == protocol.ReqSendMessage })
	p := newProducer(t, b, client.SendTimeout(150*time.Millisecond))
	// ctxT's deadline is far off: ErrTimeout is the send timeout's.
	_, err := p.SendSync(ctxT(t), &client.Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("want timeout, got %v", err)
	}
	done := make(chan error, 1)
	if err := p.SendAsync(ctxT(t), &client.Message{Topic: "T", Body: []byte("y")}, func(_ client.SendResult, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("async: want timeout, got %v", err)
	}
	// A context that ends first wins.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := p.SendSync(ctx, &client.Message{Topic: "T", Body: []byte("z")}); err == nil {
		t.Fatal("send succeeded without an answer")
	}
}

func TestCompression(t *testing.T) {
	body := bytes.Repeat([]byte("apogee compresses this body. "), 400) // ~11 KiB
	for _, tc := range []struct {
		name string
		opt  client.ProducerOpt
		flag int32
	}{
		{"zlib", client.WithCompression(client.CompressionZlib), message.FlagCompressed},
		{"zstd", client.WithCompression(client.CompressionZstd), message.FlagCompressed | message.CompressionZSTD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			p := newProducer(t, b, tc.opt)
			r, err := p.SendSync(ctxT(t), &client.Message{Topic: "Z", Body: body})
			if err != nil {
				t.Fatal(err)
			}
			v, _ := message.Decode(b.records("Z", r.Queue.QueueID)[0], true)
			if v.SysFlag() != tc.flag || len(v.Body()) >= len(body) {
				t.Fatalf("sysflag %#x, stored %d bytes", v.SysFlag(), len(v.Body()))
			}
			var got []byte
			if tc.name == "zlib" {
				zr, err := zlib.NewReader(bytes.NewReader(v.Body()))
				if err != nil {
					t.Fatal(err)
				}
				got, err = io.ReadAll(zr)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				d, _ := zstd.NewReader(nil)
				defer d.Close()
				if got, err = d.DecodeAll(v.Body(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, body) {
				t.Fatal("body does not round-trip")
			}
			// Below the threshold: stored as is.
			r, err = p.SendSync(ctxT(t), &client.Message{Topic: "Z2", Body: body[:100]})
			if err != nil {
				t.Fatal(err)
			}
			v, _ = message.Decode(b.records("Z2", r.Queue.QueueID)[0], true)
			if v.SysFlag() != 0 || !bytes.Equal(v.Body(), body[:100]) {
				t.Fatalf("small body: sysflag %#x", v.SysFlag())
			}
		})
	}
}

func TestAutoCreateThroughCreateTopicKey(t *testing.T) {
	b := newFakeBroker(t, func(b *fakeBroker) { b.autoCreate = false })
	p := newProducer(t, b)
	r, err := p.SendSync(ctxT(t), &client.Message{Topic: "NEW", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Queue.QueueID >= int32(client.DefaultCreateTopicQueueNums) || b.count("NEW") != 1 {
		t.Fatalf("%v, stored %d", r, b.count("NEW"))
	}
}

type txListener struct {
	local   atomic.Int32
	check   atomic.Int32
	checked chan *client.MessageExt
}

func (l *txListener) ExecuteLocalTransaction(_ context.Context, _ *client.Message) client.TransactionState {
	return client.TransactionState(l.local.Load())
}

func (l *txListener) CheckLocalTransaction(m *client.MessageExt) client.TransactionState {
	l.checked <- m
	return client.TransactionState(l.check.Load())
}

func TestTransactions(t *testing.T) {
	b := newFakeBroker(t)
	l := &txListener{checked: make(chan *client.MessageExt, 1)}
	p := newProducer(t, b, client.ProducerGroup("txg"), client.WithTransactionListener(l))
	ctx := ctxT(t)
	send := func(state client.TransactionState, body string) client.TransactionResult {
		l.local.Store(int32(state))
		r, err := p.SendInTransaction(ctx, &client.Message{Topic: "TX", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if r.State != state {
			t.Fatalf("state %v, want %v", r.State, state)
		}
		return r
	}
	send(client.TxCommit, "commit")
	wait.Equal(t, "committed message", 1, func() int { return b.count("TX") })
	send(client.TxRollback, "rollback")
	unknown := send(client.TxUnknown, "unknown")
	wait.Until(t, "three END_TRANSACTION", func() bool { return b.codeCount(protocol.ReqEndTransaction) == 3 })
	b.mu.Lock()
	ends := append([]protocol.EndTransactionRequest(nil), b.ends...)
	nhalf := len(b.half)
	b.mu.Unlock()
	wantStates := []int32{protocol.TransactionCommitType, protocol.TransactionRollbackType, protocol.TransactionNotType}
	for i, e := range ends {
		if e.CommitOrRollback != wantStates[i] || e.ProducerGroup != "txg" || e.FromTransactionCheck {
			t.Fatalf("end %d: %+v", i, e)
		}
	}
	if nhalf != 1 || b.count("TX") != 1 {
		t.Fatalf("%d half messages pending, %d delivered", nhalf, b.count("TX"))
	}
	// The broker checks the unknown one; the listener commits it.
	l.check.Store(int32(client.TxCommit))
	_, off, _ := message.ParseOffsetMsgID(unknown.OffsetMsgID())
	b.pushCheck(t, "txg", off)
	select {
	case m := <-l.checked:
		if string(m.Body) != "unknown" || m.MsgID != unknown.MsgID() {
			t.Fatalf("checked %v", m)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no check")
	}
	wait.Equal(t, "checked message committed", 2, func() int { return b.count("TX") })
	b.mu.Lock()
	last := b.ends[len(b.ends)-1]
	b.mu.Unlock()
	if !last.FromTransactionCheck || last.CommitLogOffset != off || last.MsgID != unknown.MsgID() {
		t.Fatalf("check answer %+v", last)
	}
	if _, err := newProducer(t, b).SendInTransaction(ctx, &client.Message{Topic: "TX"}); !errors.Is(err, client.ErrNotTransactional) {
		t.Fatalf("non-transactional producer: %v", err)
	}
}

func TestInstanceSharingAndShutdown(t *testing.T) {
	b := newFakeBroker(t)
	inst := client.InstanceName("shared-" + t.Name())
	p1, err := client.NewProducer(client.NameServer(b.addr), inst, client.ProducerGroup("g1"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := client.NewProducer(client.NameServer(b.addr), inst, client.ProducerGroup("g2"))
	if err != nil {
		t.Fatal(err)
	}
	if p1.ClientID() != p2.ClientID() {
		t.Fatal("same instance name, different client IDs")
	}
	if _, err := client.NewProducer(client.NameServer(b.addr, "127.0.0.1:1"), inst); !errors.Is(err, client.ErrInstanceConflict) {
		t.Fatalf("conflicting options: %v", err)
	}
	ctx := ctxT(t)
	for _, p := range []*client.Producer{p1, p2} {
		if _, err := p.SendSync(ctx, &client.Message{Topic: "S", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.srv.Len(); n != 1 {
		t.Fatalf("%d connections for one instance", n)
	}
	p1.Close(ctx)
	if _, err := p1.SendSync(ctx, &client.Message{Topic: "S"}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := p2.SendSync(ctx, &client.Message{Topic: "S", Body: []byte("x")}); err != nil {
		t.Fatalf("the other producer of the instance: %v", err)
	}
	p2.Close(ctx)
	wait.Until(t, "connections closed", func() bool { return b.srv.Len() == 0 })
	b.mu.Lock()
	unreg := len(b.unregisters)
	b.mu.Unlock()
	if unreg != 2 {
		t.Fatalf("%d UNREGISTER_CLIENT", unreg)
	}
}

func TestProducerConfigErrors(t *testing.T) {
	t.Setenv("NAMESRV_ADDR", "")
	for name, opts := range map[string][]client.ProducerOpt{
		"no name server": nil,
		"bad address":    {client.NameServer("nocolon")},
		"bad timeout":    {client.NameServer("127.0.0.1:9876"), client.SendTimeout(-1)},
		"bad level":      {client.NameServer("127.0.0.1:9876"), client.CompressionLevel(42)},
		"empty group":    {client.NameServer("127.0.0.1:9876"), client.ProducerGroup("")},
	} {
		if _, err := client.NewProducer(opts...); !errors.Is(err, client.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
