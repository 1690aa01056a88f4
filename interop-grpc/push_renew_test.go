package interopgrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// The broker's renewal of PushConsumer deliveries (auto_renew receives),
// shortened so that a handler slower than the first invisible time takes
// seconds: a delivery is first invisible for 2 s (RocketMQ's proxy's
// defaultInvisibleTimeMills, 60 s by default) and renewed from 1.5 s before
// it would become visible; a client whose connection is gone for 500 ms has
// its deliveries released, visible again 200 ms later.
var renewConf = []string{"defaultInvisibleTimeMills=2000", "renewAheadTimeMillis=1500",
	"renewSchedulePeriodMillis=100", "grpcRenewOfflineGraceMillis=500", "invisibleTimeMillisWhenClear=200"}

// renewFirstInvisible is defaultInvisibleTimeMills in renewConf.
const renewFirstInvisible = 2 * time.Second

// runtimeInfo reads the broker's GET_BROKER_RUNTIME_INFO (28) table.
func runtimeInfo(t *testing.T, b *broker) map[string]string {
	t.Helper()
	r, err := remotingCall(b.Addr, 28, map[string]string{}, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var kv struct {
		Table map[string]string `json:"table"`
	}
	if err := json.Unmarshal(r.Body, &kv); err != nil {
		t.Fatalf("runtime info %q: %v", r.Body, err)
	}
	return kv.Table
}

func infoInt(t *testing.T, b *broker, key string) int {
	t.Helper()
	n, err := strconv.Atoi(runtimeInfo(t, b)[key])
	if err != nil {
		t.Fatalf("runtime info %s: %v", key, err)
	}
	return n
}

// slowPush runs PushConsumers of one group whose listener blocks until
// released, counting each message's deliveries, and watches their acks.
type slowPush struct {
	mu         sync.Mutex
	deliveries map[string]int // message id → deliveries
	bodies     []string       // in delivery order
	last       time.Time      // the last delivery
	acked      map[string]v2.Code
	release    chan struct{}
	freeOnce   sync.Once
	consumers  []rmq.PushConsumer // guarded by mu
}

func newSlowPush(t *testing.T, group string) *slowPush {
	s := &slowPush{deliveries: map[string]int{}, acked: map[string]v2.Code{}, release: make(chan struct{})}
	observe := func(method string, req, resp any, err error, began time.Time) {
		if method != v2.MessagingService_AckMessage_FullMethodName || err != nil {
			return
		}
		r, ok := req.(*v2.AckMessageRequest)
		a, ok2 := resp.(*v2.AckMessageResponse)
		if !ok || !ok2 || r.GetGroup().GetName() != group {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, e := range r.GetEntries() {
			code := a.GetStatus().GetCode()
			if i < len(a.GetEntries()) {
				code = a.GetEntries()[i].GetStatus().GetCode()
			}
			s.acked[e.GetMessageId()] = code
		}
	}
	clientObserver.Store(&observe)
	t.Cleanup(func() { clientObserver.Store(nil) })
	// The consumers stop together (each graceful stop waits for its
	// client's in-flight work, seconds).
	t.Cleanup(func() {
		s.mu.Lock()
		cs := s.consumers
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.GracefulStop()
			}()
		}
		wg.Wait()
	})
	t.Cleanup(s.free) // before the stops: no listener left blocked
	return s
}

// free lets the listeners return.
func (s *slowPush) free() { s.freeOnce.Do(func() { close(s.release) }) }

func (s *slowPush) start(t *testing.T, b *broker, group, topic string) rmq.PushConsumer {
	t.Helper()
	c, err := rmq.NewPushConsumer(b.config(group), rmq.WithPushSubscriptionExpressions(all(topic)),
		rmq.WithPushAwaitDuration(time.Second), rmq.WithPushConsumptionThreadCount(4),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			s.mu.Lock()
			s.deliveries[mv.GetMessageId()]++
			s.bodies = append(s.bodies, string(mv.GetBody()))
			s.last = time.Now()
			s.mu.Unlock()
			<-s.release // the slow handler
			return rmq.SUCCESS
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	s.mu.Lock()
	s.consumers = append(s.consumers, c)
	s.mu.Unlock()
	return c
}

// delivered returns how many messages were delivered, and whether one was
// delivered more than once.
func (s *slowPush) delivered() (n int, again string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, d := range s.deliveries {
		if d > 1 {
			again = id
		}
	}
	return len(s.deliveries), again
}

// TestPushConsumerRenewed: two PushConsumers of a group whose handler is
// slower than the first invisible time: each message is delivered once
// (the broker renews it while the handler works, so the other consumer
// does not get it), and the acks the SDK sends afterwards, with the
// receipt handles of the first delivery, succeed. Normal and FIFO.
func TestPushConsumerRenewed(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		name := "normal"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			b := startBroker(t, renewConf...)
			topic, group := "Renew"+name, "RenewGroup"+name
			typ := "NORMAL"
			if fifo {
				typ = "FIFO"
				b.updateGroup(t, group, true, 16)
			}
			b.createTopic(t, topic, 4, typ)
			s := newSlowPush(t, group)
			s.start(t, b, group, topic)
			s.start(t, b, group, topic)
			p := b.producer(t, rmq.WithTopics(topic))
			// FIFO: two message groups of two messages; a group's second
			// message waits for its first's ack, so two are delivered first.
			const n = 4
			first := n
			if fifo {
				first = 2
			}
			for i := range n {
				m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint(i))}
				if fifo {
					m.SetMessageGroup(fmt.Sprint("g", i%2))
				}
				if _, err := p.Send(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			wait.For(t, "the first deliveries", func() error {
				if got, _ := s.delivered(); got < first {
					return fmt.Errorf("%d of %d delivered", got, first)
				}
				return nil
			})
			// Past twice the first invisible time, every delivery renewed.
			wait.For(t, "the handlers outlast the first invisible time", func() error {
				s.mu.Lock()
				since := time.Since(s.last)
				s.mu.Unlock()
				if since < 2*renewFirstInvisible {
					return fmt.Errorf("%v since the last delivery", since)
				}
				if r := infoInt(t, b, "grpcRenewals"); r < first {
					return fmt.Errorf("%d renewals", r)
				}
				return nil
			})
			if got, again := s.delivered(); got != first || again != "" {
				t.Fatalf("while the handlers work: %d delivered (want %d), %q delivered again", got, first, again)
			}
			s.free()
			wait.For(t, "every message consumed and acked", func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if len(s.acked) < n {
					return fmt.Errorf("%d of %d acked", len(s.acked), n)
				}
				return nil
			})
			s.mu.Lock()
			defer s.mu.Unlock()
			for id, code := range s.acked {
				if code != v2.Code_OK {
					t.Errorf("the ack of %s: %v", id, code)
				}
			}
			for id, d := range s.deliveries {
				if d != 1 {
					t.Errorf("%s delivered %d times", id, d)
				}
			}
			if fifo {
				pos := map[string]int{}
				for i, body := range s.bodies {
					pos[body] = i
				}
				if pos["0"] > pos["2"] || pos["1"] > pos["3"] {
					t.Errorf("FIFO order broken within a group: %v", s.bodies)
				}
			}
			if r := infoInt(t, b, "grpcRenewing"); r != 0 {
				t.Errorf("%d deliveries still renewed after the acks", r)
			}
		})
	}
}

// pushChildEnv makes this test binary a PushConsumer whose handler never
// returns (TestKilledPushConsumer's child): the value is
// "endpoint topic group".
const pushChildEnv = "APOGEE_INTEROP_PUSH_CHILD"

func init() {
	if v := os.Getenv(pushChildEnv); v != "" {
		os.Exit(runPushChild(strings.Fields(v)))
	}
}

// runPushChild prints "handling <body>" once its handler has a message,
// then blocks until killed.
func runPushChild(args []string) int {
	if len(args) != 4 {
		fmt.Println("error: want endpoint topic group logdir")
		return 1
	}
	// The parent's t.TempDir(): the child is killed, so it cannot remove
	// a directory of its own.
	os.Setenv("rocketmq.client.logRoot", args[3])
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	var once sync.Once
	c, err := rmq.NewPushConsumer(&rmq.Config{Endpoint: args[0], ConsumerGroup: args[2], Credentials: &credentials.SessionCredentials{}},
		rmq.WithPushSubscriptionExpressions(all(args[1])), rmq.WithPushAwaitDuration(time.Second),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			once.Do(func() { fmt.Println("handling", string(mv.GetBody())) })
			select {} // killed here
		}}))
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	select {}
}

// TestKilledPushConsumer: a PushConsumer killed (SIGKILL) while its handler
// works on a renewed message: while it lived, the message stayed with it
// past the first invisible time (another consumer of the group did not
// get it); once its connection is gone, the renewal stops and the message
// is delivered again to the other consumer.
func TestKilledPushConsumer(t *testing.T) {
	b := startBroker(t, renewConf...)
	const topic, group = "RenewKill", "RenewKillGroup"
	b.createTopic(t, topic, 4, "NORMAL")
	p := b.producer(t, rmq.WithTopics(topic))

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), pushChildEnv+"="+b.GrpcAddr+" "+topic+" "+group+" "+t.TempDir())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "push-child.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	child.Stderr = logFile
	t.Cleanup(func() {
		if t.Failed() {
			testlog.Print(t, logPath)
		}
	})
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			child.Process.Signal(syscall.SIGKILL)
			child.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(l)
	}()
	// The child's consumer subscribes first, then the message is sent: the
	// child gets it (the other consumer starts after).
	wait.For(t, "the child's consumer registered", func() error {
		if n := infoInt(t, b, "grpcClients"); n < 2 { // the producer and the child
			return fmt.Errorf("%d clients", n)
		}
		return nil
	})
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: topic, Body: []byte("slow")}); err != nil {
		t.Fatal(err)
	}
	var line string
	wait.For(t, "the child handling the message", func() error {
		select {
		case line = <-lines:
			return nil
		default:
			return fmt.Errorf("no line yet")
		}
	})
	if line != "handling slow" {
		t.Fatalf("child: %q", line)
	}
	handling := time.Now()
	s := newSlowPush(t, group)
	s.free() // this consumer's handler is quick
	s.start(t, b, group, topic)
	wait.For(t, "the child holds the message past its first invisible time", func() error {
		if since := time.Since(handling); since < 2*renewFirstInvisible {
			return fmt.Errorf("%v since the child got it", since)
		}
		if r := infoInt(t, b, "grpcRenewals"); r < 1 {
			return fmt.Errorf("%d renewals", r)
		}
		return nil
	})
	if n, _ := s.delivered(); n != 0 {
		t.Fatalf("the other consumer got the message while the child worked on it")
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	killed = true
	killedAt := time.Now()
	wait.For(t, "the message delivered again to the other consumer", func() error {
		if n, _ := s.delivered(); n != 1 {
			return fmt.Errorf("%d delivered", n)
		}
		return nil
	})
	wait.For(t, "its ack", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, code := range s.acked {
			if code == v2.Code_OK {
				return nil
			}
		}
		return fmt.Errorf("acks %v", s.acked)
	})
	if r := infoInt(t, b, "grpcRenewReleased"); r < 1 {
		t.Errorf("%d deliveries released", r)
	}
	// Reported, not bounded: the connection's grace, the scheduler's period
	// and the released delivery's invisible time, on a loaded machine.
	t.Logf("delivered again %v after the child was killed", time.Since(killedAt).Round(time.Millisecond))
}
