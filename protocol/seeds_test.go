package protocol

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// committedSeeds are the seed corpus files under testdata/fuzz. Run with
// APOGEE_WRITE_FUZZ_SEEDS=1 to (re)write them; otherwise the test checks that they are
// present and unchanged.
func committedSeeds(t *testing.T) map[string][]byte {
	gocSendJava := strings.NewReplacer(`"language":"GO"`, `"language":"JAVA"`).Replace(gocSendHeader)
	jbResponse := `{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"1","queueOffset":"5","TRACE_ON":"true","MSG_REGION":"DefaultRegion"},"flag":1,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}`
	return map[string][]byte{
		"FuzzDecodeFrame/goc-route-request":   frameOf(SerializeJSON, []byte(gocRouteHeader), nil)[4:],
		"FuzzDecodeFrame/goc-send-request":    frameOf(SerializeJSON, []byte(gocSendHeader), []byte("hello world"))[4:],
		"FuzzDecodeFrame/goc-pull-request":    frameOf(SerializeJSON, []byte(gocPullHeader), nil)[4:],
		"FuzzDecodeFrame/java-send-request":   frameOf(SerializeJSON, []byte(gocSendJava), []byte("x"))[4:],
		"FuzzDecodeFrame/jb-send-response":    frameOf(SerializeJSON, []byte(jbResponse), nil)[4:],
		"FuzzDecodeFrame/binary-send-request": frameOf(SerializeRocketMQ, mustBinary(t, gocSendHeader), []byte("hello world"))[4:],
		"FuzzDecodeFrame/binary-pull-request": frameOf(SerializeRocketMQ, mustBinary(t, gocPullHeader), nil)[4:],
		"FuzzDecodeFrame/binary-response":     frameOf(SerializeRocketMQ, mustBinary(t, jbResponse), []byte("body"))[4:],
		"FuzzJSONHeader/goc-route":            []byte(gocRouteHeader),
		"FuzzJSONHeader/goc-send":             []byte(gocSendHeader),
		"FuzzJSONHeader/goc-pull":             []byte(gocPullHeader),
		"FuzzJSONHeader/jb-response":          []byte(jbResponse),
		"FuzzJSONHeader/escapes":              []byte(`{"remark":"\u00e9\ud83d\ude00\ud800x\n","extFields":{"k\"":null}}`),
		"FuzzHeartbeat/goc":                   []byte(gocHeartbeat),
		"FuzzHeartbeat/java":                  []byte(javaHeartbeat),
		"FuzzTopicRouteData/legacy":           func() []byte { r := sampleRoute(); return r.AppendJSON(nil, false) }(),
		"FuzzTopicRouteData/standard":         func() []byte { r := sampleRoute(); return r.AppendJSON(nil, true) }(),
	}
}

func TestFuzzSeedCorpus(t *testing.T) {
	write := os.Getenv("APOGEE_WRITE_FUZZ_SEEDS") != ""
	for name, data := range committedSeeds(t) {
		path := filepath.Join("testdata", "fuzz", filepath.FromSlash(name))
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed %s: %v (run with APOGEE_WRITE_FUZZ_SEEDS=1)", name, err)
		}
		if string(got) != want {
			t.Fatalf("seed %s differs from its fixture (run with APOGEE_WRITE_FUZZ_SEEDS=1)", name)
		}
	}
}
