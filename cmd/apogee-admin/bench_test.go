package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// BenchmarkConsumerProgress1000 is the issue's target: `apogee-admin
// consumerProgress` (every group: one GET_BROKER_CONSUME_STATS per broker,
// the topic list, then each group's connections, 16 at a time) through the
// binary, on a broker process with 1,000 topics (4 queues each) and 1,000
// consumer groups, each with a retry topic and committed offsets on one of
// the topics. One op is one run of the command, process start included.
// Also the per-group form (-g) as a sub-benchmark.
//
//	go test -run XXX -bench ConsumerProgress1000 -benchtime 10x ./cmd/apogee-admin
func BenchmarkConsumerProgress1000(b *testing.B) {
	const n = 1000
	br := startBroker(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	adm, err := client.NewAdmin(client.NameServer(br.ns), client.InstanceName("bench-setup"))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close(context.Background())
	conn, err := remoting.Dial(ctx, br.addr, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			topic, group := fmt.Sprintf("BenchTopic%04d", i), fmt.Sprintf("BenchGroup%04d", i)
			for _, h := range []protocol.CreateTopicRequest{{Topic: topic, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6},
				{Topic: "%RETRY%" + group, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}} {
				if err := adm.CreateTopicAt(ctx, br.addr, h); err != nil {
					errs <- err
					return
				}
			}
			if err := adm.UpdateSubscriptionGroupAt(ctx, br.addr, protocol.DefaultSubscriptionGroupConfig(group)); err != nil {
				errs <- err
				return
			}
			for q := 0; q < 4; q++ {
				var req protocol.Command
				req.InitRequest(protocol.ReqUpdateConsumerOffset, 0)
				(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte(group), Topic: []byte(topic), QueueID: int32(q), CommitOffset: 0}).Encode(&req.Ext)
				if _, err := conn.Invoke(ctx, &req); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	dir, err := binaries()
	if err != nil {
		b.Fatal(err)
	}
	runAdmin := func(args ...string) string {
		cmd := exec.Command(filepath.Join(dir, "apogee-admin"), append(args, "-n", br.ns)...)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("apogee-admin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := runAdmin("consumerProgress"); strings.Count(out, "BenchGroup") != n {
		b.Fatalf("consumerProgress listed %d groups, want %d", strings.Count(out, "BenchGroup"), n)
	}
	b.Run("all-groups", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			runAdmin("consumerProgress")
		}
	})
	b.Run("one-group", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			runAdmin("consumerProgress", "-g", "BenchGroup0500")
		}
	})
}
