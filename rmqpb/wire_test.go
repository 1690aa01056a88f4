package rmqpb

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// describe lists what makes a protocol definition's wire format: every
// field (message, number, name, cardinality, type), enum value and method
// (with its streaming), one line each, sorted.
func describe(files ...protoreflect.FileDescriptor) []string {
	var lines []string
	var walk func(ms protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			for j := 0; j < m.Fields().Len(); j++ {
				f := m.Fields().Get(j)
				t := f.Kind().String()
				if f.Message() != nil {
					t = string(f.Message().FullName())
				} else if f.Enum() != nil {
					t = string(f.Enum().FullName())
				}
				lines = append(lines, fmt.Sprintf("field %s %d %s %s %s", m.FullName(), f.Number(), f.Name(), f.Cardinality(), t))
			}
			walk(m.Messages())
		}
	}
	for _, fd := range files {
		walk(fd.Messages())
		for i := 0; i < fd.Enums().Len(); i++ {
			e := fd.Enums().Get(i)
			for j := 0; j < e.Values().Len(); j++ {
				v := e.Values().Get(j)
				lines = append(lines, fmt.Sprintf("enum %s %d %s", e.FullName(), v.Number(), v.Name()))
			}
		}
		for i := 0; i < fd.Services().Len(); i++ {
			s := fd.Services().Get(i)
			for j := 0; j < s.Methods().Len(); j++ {
				m := s.Methods().Get(j)
				lines = append(lines, fmt.Sprintf("rpc %s %s %s %v %s %v", s.FullName(), m.Name(), m.Input().FullName(),
					m.IsStreamingClient(), m.Output().FullName(), m.IsStreamingServer()))
			}
		}
	}
	sort.Strings(lines)
	return lines
}

// TestWireIdenticalToOfficialClient checks the definitions against those
// the official RocketMQ 5 Go client v5.1.2 was generated from:
// testdata/official-golang-v5.1.2.txt is describe's output over that
// client's generated package (github.com/apache/rocketmq-clients/golang/v5
// v5.1.2, protocol/v2). Every field, enum value and method it has must be
// here, identical; the project's definitions follow the newer
// apache/rocketmq-apis and so may have more.
func TestWireIdenticalToOfficialClient(t *testing.T) {
	ours := make(map[string]bool)
	for _, l := range describe(File_apache_rocketmq_v2_definition_proto, File_apache_rocketmq_v2_service_proto) {
		ours[l] = true
	}
	f, err := os.Open("testdata/official-golang-v5.1.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		if !ours[sc.Text()] {
			t.Errorf("missing or different: %s", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 250 {
		t.Fatalf("the golden file has %d lines; expected the whole protocol", n)
	}
}

// TestEveryMethod pins the service's methods: the gRPC front end
// implements each of them.
func TestEveryMethod(t *testing.T) {
	want := []string{"QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "ReceiveMessage", "AckMessage",
		"ForwardMessageToDeadLetterQueue", "PullMessage", "UpdateOffset", "GetOffset", "QueryOffset", "EndTransaction",
		"Telemetry", "NotifyClientTermination", "ChangeInvisibleDuration", "RecallMessage", "SyncLiteSubscription"}
	ms := File_apache_rocketmq_v2_service_proto.Services().ByName("MessagingService").Methods()
	if ms.Len() != len(want) {
		t.Errorf("%d methods, want %d", ms.Len(), len(want))
	}
	for _, name := range want {
		if ms.ByName(protoreflect.Name(name)) == nil {
			t.Errorf("method %s missing", name)
		}
	}
}
