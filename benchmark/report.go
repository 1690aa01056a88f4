package benchmark

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Percentiles of a latency series, in µs.
type Percentiles struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
	P99   int64 `json:"p99"`
	P999  int64 `json:"p999"`
	P9999 int64 `json:"p9999"`
	Max   int64 `json:"max"`
}

func percentiles(h *hdr.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: h.TotalCount(),
		P50:   h.ValueAtQuantile(50),
		P90:   h.ValueAtQuantile(90),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		P9999: h.ValueAtQuantile(99.99),
		Max:   h.Max(),
	}
}

// Result is a run's summary. Its JSON form is the last line of --json output.
type Result struct {
	Mode     Mode    `json:"mode"`
	Messages int64   `json:"messages"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	// MsgsPerSec and MiBPerSec are what producers got acknowledged (consume
	// mode: what consumers received).
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MiBPerSec  float64 `json:"mib_per_sec"`
	// Consumed counts messages received by consumers in the measured part.
	Consumed          int64   `json:"consumed"`
	ConsumeMsgsPerSec float64 `json:"consume_msgs_per_sec"`
	// SendLatency: intended send time to acknowledgement.
	SendLatency Percentiles `json:"send_latency_us"`
	// E2ELatency: send time (in the body) to consumer receipt.
	E2ELatency Percentiles `json:"e2e_latency_us"`
	// SendDelay (fixed rate only): actual minus intended send time.
	SendDelay Percentiles `json:"send_delay_us"`
	// TargetRate is --rate; RateReached is false when the run fell more than
	// 5% short of it.
	TargetRate  float64 `json:"target_rate,omitempty"`
	RateReached bool    `json:"rate_reached"`
	// MaxRate is --find-max's answer: the highest rate whose p99 send latency
	// stayed under the bound.
	MaxRate float64 `json:"max_rate,omitempty"`
	Config  string  `json:"config"`
}

func usString(us int64) string {
	switch {
	case us >= 10_000_000:
		return fmt.Sprintf("%.1fs", float64(us)/1e6)
	case us >= 10_000:
		return fmt.Sprintf("%.1fms", float64(us)/1e3)
	default:
		return fmt.Sprintf("%dµs", us)
	}
}

// printLine writes the per-second line.
func printLine(w io.Writer, elapsed time.Duration, warm bool, msgs, bytes, recv, errs int64, send, e2e *hdr.Histogram) {
	tag := ""
	if warm {
		tag = " (warm-up)"
	}
	fmt.Fprintf(w, "%5.0fs  %9d msgs/s  %8.1f MiB/s", elapsed.Seconds(), msgs, float64(bytes)/(1<<20))
	if send.TotalCount() > 0 {
		fmt.Fprintf(w, "  send p50 %s p99 %s", usString(send.ValueAtQuantile(50)), usString(send.ValueAtQuantile(99)))
	}
	if recv > 0 || e2e.TotalCount() > 0 {
		fmt.Fprintf(w, "  recv %d msgs/s", recv)
	}
	if e2e.TotalCount() > 0 {
		fmt.Fprintf(w, "  e2e p50 %s p99 %s", usString(e2e.ValueAtQuantile(50)), usString(e2e.ValueAtQuantile(99)))
	}
	fmt.Fprintf(w, "  errors %d%s\n", errs, tag)
}

// printSummary writes the human summary.
func printSummary(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n== %s: %s\n", r.Mode, r.Config)
	fmt.Fprintf(w, "messages %d in %.1fs: %.0f msgs/s, %.1f MiB/s, errors %d\n", r.Messages, r.Seconds, r.MsgsPerSec, r.MiBPerSec, r.Errors)
	if r.Consumed > 0 {
		fmt.Fprintf(w, "consumed %d: %.0f msgs/s\n", r.Consumed, r.ConsumeMsgsPerSec)
	}
	if r.TargetRate > 0 {
		state := "reached"
		if !r.RateReached {
			state = "NOT reached"
		}
		fmt.Fprintf(w, "target rate %.0f msgs/s: %s\n", r.TargetRate, state)
	}
	line := func(name string, p Percentiles) {
		if p.Count == 0 {
			return
		}
		fmt.Fprintf(w, "%-14s p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s  (%d samples)\n", name,
			usString(p.P50), usString(p.P90), usString(p.P99), usString(p.P999), usString(p.P9999), usString(p.Max), p.Count)
	}
	line("send-to-ack", r.SendLatency)
	line("end-to-end", r.E2ELatency)
	line("send delay", r.SendDelay)
	if r.MaxRate > 0 {
		fmt.Fprintf(w, "highest rate with p99 send latency under the bound: %.0f msgs/s\n", r.MaxRate)
	}
}

// printJSON writes r as one line.
func printJSON(w io.Writer, r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", strings.TrimSpace(string(b)))
	return err
}

// PrintJSON writes r as one JSON line (the contract's --json output).
func PrintJSON(w io.Writer, r *Result) error { return printJSON(w, r) }
