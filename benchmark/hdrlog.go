package benchmark

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// The interval log (--hdr-out) is HdrHistogram's log format, version 1.3, as
// its Java HistogramLogWriter writes it and HistogramLogProcessor reads it:
//
//	#[Histogram log format version 1.3]
//	#[StartTime: 1796132796.611 (seconds since epoch), 2026-12-01T13:46:36.611Z]
//	#[BaseTime: 1796132796.611 (seconds since epoch)]
//	#[apogee-bench ...: values in nanoseconds; Interval_Max in milliseconds ...]
//	"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//	Tag=send,0.000,1.000,12.583,HISTFAAA...
//
// Each interval line is one second of one series: its start in seconds
// after BaseTime, its length in seconds, its largest value in milliseconds,
// and the histogram (base64 of the compressed V2 encoding) of the values in
// nanoseconds, the unit HdrHistogram's tools assume (they print
// milliseconds). Tags name the series: send (intended send time to
// acknowledgement), e2e (send time to receipt by a consumer) and delay
// (intended to actual send time, fixed-rate runs only). Only the measured
// part of a run is logged, so the log's percentiles are the summary's.
//
// hdrhistogram-go's own HistogramLogWriter is not used: it writes the end
// time where the format has the interval's length, timestamps in
// milliseconds where it has seconds, and a StartTime comment whose date is
// off by up to 999 seconds.

// HdrLogFormatVersion is the log format version written.
const HdrLogFormatVersion = "1.3"

// hdrLogWriter writes interval histograms.
type hdrLogWriter struct {
	w     *bufio.Writer
	base  time.Time
	ns    *hdr.Histogram // scratch: an interval converted to nanoseconds
	err   error
	flush func() error
}

// newHdrLogWriter writes the log's header to w, with start as its
// StartTime and BaseTime.
func newHdrLogWriter(w io.Writer, start time.Time, comment string) *hdrLogWriter {
	bw := bufio.NewWriter(w)
	l := &hdrLogWriter{w: bw, base: start, ns: hdr.New(1000, maxLatencyUs*1000, sigFigs), flush: bw.Flush}
	secs := float64(start.UnixMilli()) / 1000
	fmt.Fprintf(bw, "#[Histogram log format version %s]\n", HdrLogFormatVersion)
	fmt.Fprintf(bw, "#[StartTime: %.3f (seconds since epoch), %s]\n", secs, start.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	fmt.Fprintf(bw, "#[BaseTime: %.3f (seconds since epoch)]\n", secs)
	if comment != "" {
		fmt.Fprintf(bw, "#[%s]\n", comment)
	}
	fmt.Fprintf(bw, "%q,%q,%q,%q\n", "StartTimestamp", "Interval_Length", "Interval_Max", "Interval_Compressed_Histogram")
	return l
}

// write logs one interval of series tag: us holds microseconds recorded
// between from and to.
func (l *hdrLogWriter) write(tag string, from, to time.Time, us *hdr.Histogram) {
	if l.err != nil || us.TotalCount() == 0 {
		return
	}
	l.ns.Reset()
	for _, b := range us.Distribution() {
		if b.Count > 0 {
			l.ns.RecordValues(b.From*1000, b.Count)
		}
	}
	enc, err := l.ns.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		l.err = err
		return
	}
	_, l.err = fmt.Fprintf(l.w, "Tag=%s,%.3f,%.3f,%.3f,%s\n", tag, from.Sub(l.base).Seconds(), to.Sub(from).Seconds(),
		float64(us.Max())/1000, enc)
}

// close flushes the log and returns the first error met.
func (l *hdrLogWriter) close() error {
	if err := l.flush(); l.err == nil {
		l.err = err
	}
	return l.err
}

// HdrInterval is one interval line of a log.
type HdrInterval struct {
	Tag string
	// Start is seconds after the log's base time; Length in seconds.
	Start, Length float64
	// Histogram holds the interval's values in the log's unit (nanoseconds
	// for apogee-bench's logs).
	Histogram *hdr.Histogram
}

// HdrLog is a parsed interval log.
type HdrLog struct {
	// StartTime is the log's StartTime (zero if it has none).
	StartTime time.Time
	Intervals []HdrInterval
}

// ReadHdrLog parses an interval log in HdrHistogram's format (1.2 or 1.3,
// with or without tags): comment lines start with '#', the legend line with
// a quote.
func ReadHdrLog(r io.Reader) (*HdrLog, error) {
	log := &HdrLog{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, `"`):
			continue
		case strings.HasPrefix(line, "#[StartTime: "):
			f := strings.Fields(strings.TrimPrefix(line, "#[StartTime: "))
			if len(f) > 0 {
				if secs, err := strconv.ParseFloat(f[0], 64); err == nil {
					log.StartTime = time.UnixMilli(int64(math.Round(secs * 1000)))
				}
			}
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		iv, err := parseInterval(line)
		if err != nil {
			return nil, fmt.Errorf("hdr log line %d: %w", n, err)
		}
		log.Intervals = append(log.Intervals, iv)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(log.Intervals) == 0 {
		return nil, errors.New("hdr log: no interval histograms")
	}
	return log, nil
}

func parseInterval(line string) (HdrInterval, error) {
	var iv HdrInterval
	if rest, ok := strings.CutPrefix(line, "Tag="); ok {
		tag, rest, ok := strings.Cut(rest, ",")
		if !ok {
			return iv, errors.New("a tag and nothing else")
		}
		iv.Tag, line = tag, rest
	}
	f := strings.Split(line, ",")
	if len(f) != 4 {
		return iv, fmt.Errorf("want 4 comma-separated fields after the tag, got %d", len(f))
	}
	var err error
	if iv.Start, err = strconv.ParseFloat(f[0], 64); err != nil {
		return iv, fmt.Errorf("start: %w", err)
	}
	if iv.Length, err = strconv.ParseFloat(f[1], 64); err != nil {
		return iv, fmt.Errorf("length: %w", err)
	}
	if iv.Histogram, err = hdr.Decode([]byte(f[3])); err != nil {
		return iv, fmt.Errorf("histogram: %w", err)
	}
	return iv, nil
}

// Merged returns, for each tag in order of first appearance, the sum of its
// intervals.
func (l *HdrLog) Merged() (tags []string, hs map[string]*hdr.Histogram) {
	hs = map[string]*hdr.Histogram{}
	for _, iv := range l.Intervals {
		h, ok := hs[iv.Tag]
		if !ok {
			h = hdr.New(iv.Histogram.LowestTrackableValue(), iv.Histogram.HighestTrackableValue(), int(iv.Histogram.SignificantFigures()))
			hs[iv.Tag] = h
			tags = append(tags, iv.Tag)
		}
		h.Merge(iv.Histogram)
	}
	return tags, hs
}
