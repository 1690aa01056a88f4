package benchmark

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// TestHdrLogRoundTrip: the log's header states its time consistently, the
// interval lines carry start offsets and lengths in seconds and the maximum
// in milliseconds, and the histograms hold nanoseconds.
func TestHdrLogRoundTrip(t *testing.T) {
	start := time.Date(2026, 12, 1, 13, 46, 36, 611e6, time.UTC)
	var buf bytes.Buffer
	l := newHdrLogWriter(&buf, start, "test run")
	us := newHistogram()
	for _, v := range []int64{250, 500, 1000, 12_345} { // µs
		us.RecordValue(v)
	}
	l.write("send", start.Add(2*time.Second), start.Add(3*time.Second), us)
	l.write("e2e", start.Add(3*time.Second), start.Add(4*time.Second), newHistogram()) // empty: skipped
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"#[Histogram log format version 1.3]\n",
		"#[StartTime: 1796132796.611 (seconds since epoch), 2026-12-01T13:46:36.611Z]\n",
		"#[BaseTime: 1796132796.611 (seconds since epoch)]\n",
		"#[test run]\n",
		`"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"` + "\n",
		"Tag=send,2.000,1.000,12.351,HISTF",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("log lacks %q:\n%s", want, text)
		}
	}
	// The wall-clock date agrees with the epoch seconds.
	if got := time.Unix(1796132796, 611e6).UTC(); !got.Equal(start) {
		t.Fatalf("epoch 1796132796.611 is %v, the header says %v", got, start)
	}
	if strings.Contains(text, "Tag=e2e") {
		t.Fatal("an empty interval was logged")
	}
	log, err := ReadHdrLog(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !log.StartTime.Equal(start) || len(log.Intervals) != 1 {
		t.Fatalf("read back %+v", log)
	}
	iv := log.Intervals[0]
	h := iv.Histogram
	if iv.Tag != "send" || iv.Start != 2 || iv.Length != 1 || h.TotalCount() != 4 {
		t.Fatalf("interval %+v (count %d)", iv, h.TotalCount())
	}
	// Nanoseconds, within the histogram's 3 significant digits.
	for q, wantUs := range map[float64]int64{25: 250, 50: 500, 75: 1000, 100: 12_345} {
		got := float64(h.ValueAtQuantile(q))
		if math.Abs(got-float64(wantUs*1000)) > float64(wantUs*1000)/500 {
			t.Errorf("p%v = %.0f ns, want about %d µs", q, got, wantUs)
		}
	}
	tags, hs := log.Merged()
	if len(tags) != 1 || hs["send"].TotalCount() != 4 {
		t.Fatalf("merged %v", tags)
	}
	if _, err := ReadHdrLog(strings.NewReader("#[Histogram log format version 1.3]\n")); err == nil {
		t.Fatal("a log without intervals was accepted")
	}
	if _, err := ReadHdrLog(strings.NewReader("Tag=x,1,2,3\n")); err == nil {
		t.Fatal("a short interval line was accepted")
	}
}
