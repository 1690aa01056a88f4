package protocol

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/headers.golden")

// typedHeader is what every typed custom header offers.
type typedHeader interface {
	Decode(*ExtFields) error
	Encode(*ExtFields)
}

// goldenHeaders lists every typed header, by name, with a constructor.
var goldenHeaders = []struct {
	name string
	new  func() typedHeader
}{
	{"SendMessageRequest", func() typedHeader { return new(SendMessageRequest) }},
	{"SendMessageResponse", func() typedHeader { return new(SendMessageResponse) }},
	{"PullMessageRequest", func() typedHeader { return new(PullMessageRequest) }},
	{"PullMessageResponse", func() typedHeader { return new(PullMessageResponse) }},
	{"QueryConsumerOffsetRequest", func() typedHeader { return new(QueryConsumerOffsetRequest) }},
	{"UpdateConsumerOffsetRequest", func() typedHeader { return new(UpdateConsumerOffsetRequest) }},
	{"QueueRequest", func() typedHeader { return new(QueueRequest) }},
	{"SearchOffsetByTimestampRequest", func() typedHeader { return new(SearchOffsetByTimestampRequest) }},
	{"OffsetResponse", func() typedHeader { return new(OffsetResponse) }},
	{"GetEarliestMsgStoretimeResponse", func() typedHeader { return new(GetEarliestMsgStoretimeResponse) }},
	{"GetConsumerListByGroupRequest", func() typedHeader { return new(GetConsumerListByGroupRequest) }},
	{"NotifyConsumerIdsChangedRequest", func() typedHeader { return new(NotifyConsumerIdsChangedRequest) }},
	{"ConsumerSendMsgBackRequest", func() typedHeader { return new(ConsumerSendMsgBackRequest) }},
	{"EndTransactionRequest", func() typedHeader { return new(EndTransactionRequest) }},
	{"CheckTransactionStateRequest", func() typedHeader { return new(CheckTransactionStateRequest) }},
	{"ReplyMessageRequest", func() typedHeader { return new(ReplyMessageRequest) }},
	{"QueryMessageRequest", func() typedHeader { return new(QueryMessageRequest) }},
	{"QueryMessageResponse", func() typedHeader { return new(QueryMessageResponse) }},
	{"ViewMessageByIDRequest", func() typedHeader { return new(ViewMessageByIDRequest) }},
	{"GetRouteInfoRequest", func() typedHeader { return new(GetRouteInfoRequest) }},
	{"RegisterBrokerRequest", func() typedHeader { return new(RegisterBrokerRequest) }},
	{"RegisterBrokerResponse", func() typedHeader { return new(RegisterBrokerResponse) }},
	{"UnregisterBrokerRequest", func() typedHeader { return new(UnregisterBrokerRequest) }},
	{"CreateTopicRequest", func() typedHeader { return new(CreateTopicRequest) }},
	{"DeleteTopicRequest", func() typedHeader { return new(DeleteTopicRequest) }},
	{"RegisterTopicRequest", func() typedHeader { return new(RegisterTopicRequest) }},
	{"UnregisterClientRequest", func() typedHeader { return new(UnregisterClientRequest) }},
	{"ResetOffsetRequest", func() typedHeader { return new(ResetOffsetRequest) }},
	{"GetConsumerRunningInfoRequest", func() typedHeader { return new(GetConsumerRunningInfoRequest) }},
	{"ConsumeMessageDirectlyRequest", func() typedHeader { return new(ConsumeMessageDirectlyRequest) }},
	{"GetConsumerStatusRequest", func() typedHeader { return new(GetConsumerStatusRequest) }},
	{"PopMessageRequest", func() typedHeader { return new(PopMessageRequest) }},
	{"PopMessageResponse", func() typedHeader { return new(PopMessageResponse) }},
	{"AckMessageRequest", func() typedHeader { return new(AckMessageRequest) }},
	{"ChangeInvisibleTimeRequest", func() typedHeader { return new(ChangeInvisibleTimeRequest) }},
	{"ChangeInvisibleTimeResponse", func() typedHeader { return new(ChangeInvisibleTimeResponse) }},
	{"PeekMessageRequest", func() typedHeader { return new(PeekMessageRequest) }},
	{"NotificationRequest", func() typedHeader { return new(NotificationRequest) }},
	{"NotificationResponse", func() typedHeader { return new(NotificationResponse) }},
	{"PollingInfoRequest", func() typedHeader { return new(PollingInfoRequest) }},
	{"PollingInfoResponse", func() typedHeader { return new(PollingInfoResponse) }},
	{"RecallMessageRequest", func() typedHeader { return new(RecallMessageRequest) }},
	{"RecallMessageResponse", func() typedHeader { return new(RecallMessageResponse) }},
	{"GetSubscriptionGroupConfigRequest", func() typedHeader { return new(GetSubscriptionGroupConfigRequest) }},
	{"DeleteSubscriptionGroupRequest", func() typedHeader { return new(DeleteSubscriptionGroupRequest) }},
	{"GetTopicsByClusterRequest", func() typedHeader { return new(GetTopicsByClusterRequest) }},
	{"KVConfigRequest", func() typedHeader { return new(KVConfigRequest) }},
	{"GetKVConfigResponse", func() typedHeader { return new(GetKVConfigResponse) }},
	// The admin protocol (header_admin.go).
	{"GetTopicStatsInfoRequest", func() typedHeader { return new(GetTopicStatsInfoRequest) }},
	{"GetProducerConnectionListRequest", func() typedHeader { return new(GetProducerConnectionListRequest) }},
	{"GetConsumeStatsRequest", func() typedHeader { return new(GetConsumeStatsRequest) }},
	{"QueryConsumeTimeSpanRequest", func() typedHeader { return new(QueryConsumeTimeSpanRequest) }},
	{"CloneGroupOffsetRequest", func() typedHeader { return new(CloneGroupOffsetRequest) }},
	{"ViewBrokerStatsDataRequest", func() typedHeader { return new(ViewBrokerStatsDataRequest) }},
	{"GetConsumeStatsInBrokerRequest", func() typedHeader { return new(GetConsumeStatsInBrokerRequest) }},
	{"QueryConsumeQueueRequest", func() typedHeader { return new(QueryConsumeQueueRequest) }},
	{"QueryTopicsByConsumerRequest", func() typedHeader { return new(QueryTopicsByConsumerRequest) }},
	{"QuerySubscriptionByConsumerRequest", func() typedHeader { return new(QuerySubscriptionByConsumerRequest) }},
	{"GetBrokerConfigResponse", func() typedHeader { return new(GetBrokerConfigResponse) }},
	{"BrokerNameRequest", func() typedHeader { return new(BrokerNameRequest) }},
	{"WipeWritePermResponse", func() typedHeader { return new(WipeWritePermResponse) }},
	{"AddWritePermResponse", func() typedHeader { return new(AddWritePermResponse) }},
}

// TestGoldenCoversEveryHeader checks that goldenHeaders lists every header
// headers_gen.go has a codec for.
func TestGoldenCoversEveryHeader(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "headers_gen.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, gh := range goldenHeaders {
		listed[gh.name] = true
	}
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || fd.Name.Name != "Decode" {
			continue
		}
		n++
		recv := fd.Recv.List[0].Type.(*ast.StarExpr).X.(*ast.Ident).Name
		if !listed[recv] {
			t.Errorf("%s has a generated codec but is not in goldenHeaders", recv)
		}
	}
	if n != len(goldenHeaders) {
		t.Errorf("headers_gen.go has %d decoders, goldenHeaders lists %d headers", n, len(goldenHeaders))
	}
}

// goldenAliases are alternative spellings a decoder accepts for a key.
var goldenAliases = map[string]map[string]string{
	"QueueRequest":                   {"topic": "Topic", "queueId": "QueueId"},
	"SearchOffsetByTimestampRequest": {"topic": "Topic", "queueId": "QueueId"},
}

// fillHeader sets every exported field of h to a distinct non-zero value
// (presence flags to true), so that Encode writes every key it knows.
func fillHeader(h typedHeader) {
	v := reflect.ValueOf(h).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("v-" + strings.ToLower(sf.Name))
		case reflect.Slice:
			f.SetBytes([]byte("v-" + strings.ToLower(sf.Name)))
		case reflect.Int32:
			f.SetInt(int64(100 + nameNumber(sf.Name)))
		case reflect.Int64:
			f.SetInt(int64(1700000000000 + nameNumber(sf.Name)))
		case reflect.Bool:
			f.SetBool(true)
		}
	}
}

// nameNumber derives a small number from a field name, so that the values
// fillHeader picks do not depend on the order of the fields.
func nameNumber(name string) int {
	n := 0
	for _, c := range name {
		n = (n*31 + int(c)) % 9973
	}
	return n
}

// renderPairs writes ext's pairs sorted by key (the order of keys on the wire
// carries no meaning to any peer: both decode into maps).
func renderPairs(ext *ExtFields) string {
	var ps []string
	for i := 0; i < ext.Len(); i++ {
		k, v := ext.At(i)
		ps = append(ps, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(ps)
	return strings.Join(ps, " ")
}

// renderHeader writes the exported value fields of h, sorted by name; presence flags (Has*)
// are left out, so that the rendering compares across codec versions.
func renderHeader(h typedHeader) string {
	v := reflect.ValueOf(h).Elem()
	var fs []string
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() || f.Kind() == reflect.Bool && strings.HasPrefix(sf.Name, "Has") {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			fs = append(fs, fmt.Sprintf("%s=%q", sf.Name, f.String()))
		case reflect.Slice:
			fs = append(fs, fmt.Sprintf("%s=%q", sf.Name, f.Bytes()))
		default:
			fs = append(fs, fmt.Sprintf("%s=%v", sf.Name, f.Interface()))
		}
	}
	sort.Strings(fs) // independent of the order of the fields
	return " " + strings.Join(fs, " ")
}

// decodeResult decodes pairs into a fresh header and renders the outcome.
func decodeResult(newH func() typedHeader, pairs [][2]string) string {
	var ext ExtFields
	for _, p := range pairs {
		addPair(&ext, p[0], p[1])
	}
	h := newH()
	if err := h.Decode(&ext); err != nil {
		return "error: " + err.Error()
	}
	return "ok:" + renderHeader(h)
}

func extPairs(ext *ExtFields) [][2]string {
	var ps [][2]string
	for i := 0; i < ext.Len(); i++ {
		k, v := ext.At(i)
		ps = append(ps, [2]string{string(k), string(v)})
	}
	return ps
}

// TestHeadersGolden pins what every typed header writes and how it reads
// (keys, which keys are written when, required keys, defaults, error text) in
// testdata/headers.golden: a change to the wire behaviour shows up as a diff
// of that file. Run with -update to rewrite it after a deliberate change.
func TestHeadersGolden(t *testing.T) {
	var out bytes.Buffer
	for _, gh := range goldenHeaders {
		fmt.Fprintf(&out, "== %s\n", gh.name)
		full := gh.new()
		fillHeader(full)
		var ext ExtFields
		full.Encode(&ext)
		fmt.Fprintf(&out, "encode full: %s\n", renderPairs(&ext))
		var zext ExtFields
		gh.new().Encode(&zext)
		fmt.Fprintf(&out, "encode zero: %s\n", renderPairs(&zext))
		if v2, ok := full.(interface{ EncodeV2(*ExtFields) }); ok {
			var e2 ExtFields
			v2.EncodeV2(&e2)
			fmt.Fprintf(&out, "encodeV2 full: %s\n", renderPairs(&e2))
			fmt.Fprintf(&out, "decode V2 full: %s\n", decodeResult(gh.new, extPairs(&e2)))
		}
		pairs := extPairs(&ext)
		// Cases in key order: independent of the order Encode writes the keys in.
		sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
		fmt.Fprintf(&out, "decode full: %s\n", decodeResult(gh.new, pairs))
		fmt.Fprintf(&out, "decode none: %s\n", decodeResult(gh.new, nil))
		for i, p := range pairs {
			var drop, empty, bad [][2]string
			drop = append(append(drop, pairs[:i]...), pairs[i+1:]...)
			empty = append(empty, pairs...)
			empty[i][1] = ""
			bad = append(bad, pairs...)
			bad[i][1] = "x?"
			fmt.Fprintf(&out, "decode without %s: %s\n", p[0], decodeResult(gh.new, drop))
			fmt.Fprintf(&out, "decode empty %s: %s\n", p[0], decodeResult(gh.new, empty))
			fmt.Fprintf(&out, "decode bad %s: %s\n", p[0], decodeResult(gh.new, bad))
			if alias, ok := goldenAliases[gh.name][p[0]]; ok {
				renamed := append([][2]string(nil), pairs...)
				renamed[i][0] = alias
				fmt.Fprintf(&out, "decode %s as %s: %s\n", p[0], alias, decodeResult(gh.new, renamed))
			}
		}
	}
	const path = "testdata/headers.golden"
	if *updateGolden {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		gl, wl := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
}
