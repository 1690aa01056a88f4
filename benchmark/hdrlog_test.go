package benchmark

import (
	"bytes"
	"image/png"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
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

// TestPlotPercentiles renders two series and checks the picture: its size,
// and each series' colour drawn in the plot area.
func TestPlotPercentiles(t *testing.T) {
	a, b := hdrNs(), hdrNs()
	for i := int64(1); i <= 10_000; i++ {
		a.RecordValue(i * 100_000)  // 0.1 to 1000 ms
		b.RecordValue(i*50_000 + 1) // half of it
	}
	var buf bytes.Buffer
	if err := PlotPercentiles(&buf, []PlotSeries{{"a send", a}, {"b e2e", b}}, PlotOptions{Title: "test"}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() != 960 || r.Dy() != 600 {
		t.Fatalf("image %v", r)
	}
	seen := map[int]int{}
	for y := 70; y < 600-78; y++ {
		for x := 96 + 300; x < 960-60; x++ { // right of the legend
			seen[plotPalette.Index(img.At(x, y))]++
		}
	}
	for i := range 2 {
		if seen[firstSeriesColour+i] < 100 {
			t.Errorf("series %d drawn with %d pixels", i, seen[firstSeriesColour+i])
		}
	}
	buf.Reset()
	if err := PlotPercentiles(&buf, []PlotSeries{{"a", a}, {"b", b}}, PlotOptions{LogY: true, Width: 640, Height: 400}); err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(&buf); err != nil || img.Bounds().Dx() != 640 {
		t.Fatalf("log-scale plot: %v", err)
	}
	if err := PlotPercentiles(&buf, nil, PlotOptions{}); err == nil {
		t.Fatal("a plot of nothing was drawn")
	}
}

// hdrNs is a histogram of nanoseconds, as the logs hold.
func hdrNs() *hdr.Histogram { return hdr.New(1000, maxLatencyUs*1000, sigFigs) }

func TestMsString(t *testing.T) {
	for ns, want := range map[int64]string{481_000: "0.481ms", 2_523_000: "2.52ms", 24_100_000: "24.1ms", 312_400_000: "312ms", 1_210_000_000: "1.21s"} {
		if got := msString(ns); got != want {
			t.Errorf("msString(%d) = %q, want %q", ns, got, want)
		}
	}
}

func TestNinesLabelsAndSteps(t *testing.T) {
	var got []string
	for k := range 6 {
		got = append(got, ninesLabel(k))
	}
	if strings.Join(got, " ") != "0% 90% 99% 99.9% 99.99% 99.999%" {
		t.Fatalf("labels %q", got)
	}
	for x, want := range map[float64]float64{0.3: 0.5, 7: 10, 12: 20, 0.04: 0.05, 100: 100} {
		if got := niceStep(x); strconv.FormatFloat(got, 'g', -1, 64) != strconv.FormatFloat(want, 'g', -1, 64) {
			t.Errorf("niceStep(%v) = %v, want %v", x, got, want)
		}
	}
}
