package benchmark

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
	Mode     Mode  `json:"mode"`
	Messages int64 `json:"messages"`
	Errors   int64 `json:"errors"`
	// With --messages (Limit): Sent is what the producers sent in all,
	// warm-up included (Limit, unless Duration or an interrupt ended the run
	// first), and WarmupMessages what the warm-up had acknowledged; Messages
	// counts the measured part only. In consume mode Sent is the backlog.
	Limit          int64 `json:"limit,omitempty"`
	Sent           int64 `json:"sent,omitempty"`
	WarmupMessages int64 `json:"warmup_messages,omitempty"`
	// Stored is how many messages the topic gained during the run, as the
	// broker or store reports them (see stored.go); nil when unknown, and
	// StoredNote says why (or how it was counted).
	Stored     *int64  `json:"stored"`
	StoredNote string  `json:"stored_note,omitempty"`
	Seconds    float64 `json:"seconds"`
	// MsgsPerSec and MiBPerSec are what producers got acknowledged (consume
	// mode: what consumers received, the drain rate).
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MiBPerSec  float64 `json:"mib_per_sec"`
	// Consumed counts messages received by consumers in the measured part.
	Consumed          int64   `json:"consumed"`
	ConsumeMsgsPerSec float64 `json:"consume_msgs_per_sec"`
	// SendLatency: intended send time to acknowledgement (closed loop: the
	// actual send time). Empty (count 0) in consume mode.
	SendLatency Percentiles `json:"send_latency_us"`
	// E2ELatency: send time (in the body) to consumer receipt. Empty (count
	// 0) where it means nothing: produce mode, and consume mode, whose
	// messages were all sent before the clock started.
	E2ELatency Percentiles `json:"e2e_latency_us"`
	// SendDelay (fixed rate only): actual minus intended send time.
	SendDelay Percentiles `json:"send_delay_us"`
	// TargetRate is the fixed rate (0: closed loop); RateReached is false
	// when the run fell more than 5% short of it.
	TargetRate  float64 `json:"target_rate,omitempty"`
	RateReached bool    `json:"rate_reached"`
	// ClosedLoop: producers sent as fast as acknowledgements came back.
	ClosedLoop bool `json:"closed_loop"`
	// Roles names what ran: "producers", "consumers" (client modes),
	// "writers", "readers" (store mode).
	Roles []string `json:"roles"`
	// Backlog and BacklogMean (e2e and store) are the messages acknowledged
	// but not yet received, at the end of the measured part and on average
	// over its once-a-second samples. ConsumersBehind is set when the
	// consumers fell behind (see consumersBehind): the end-to-end figures then
	// measure the queue in front of them, not the broker's latency. In consume
	// mode Backlog is the number of messages produced before the drain.
	Backlog         int64 `json:"backlog"`
	BacklogMean     int64 `json:"backlog_mean,omitempty"`
	ConsumersBehind bool  `json:"consumers_behind"`
	// MaxRate is --find-max's answer: the highest rate whose p99 send latency
	// stayed under the bound.
	MaxRate float64 `json:"max_rate,omitempty"`
	Config  string  `json:"config"`
	// CPU time (user+system) per message of the measured part, in µs: per
	// acknowledged message, per consumed message in consume mode (see
	// cpu.go). Broker: the broker's process; client: this process; null when
	// unknown (CPUNote says why). ProcessCPUUsPerMsg instead of both when
	// the broker or store runs in this process.
	BrokerCPUUsPerMsg  *float64 `json:"broker_cpu_us_per_msg"`
	ClientCPUUsPerMsg  *float64 `json:"client_cpu_us_per_msg"`
	ProcessCPUUsPerMsg *float64 `json:"process_cpu_us_per_msg,omitempty"`
	BrokerPID          int      `json:"broker_pid,omitempty"`
	CPUNote            string   `json:"cpu_note,omitempty"`
	// The kernel's counters per message of the measured part, for the same
	// processes as the CPU figures (see kernel.go): read-like and
	// write-like system calls (syscr and syscw of /proc/PID/io) and
	// voluntary and involuntary context switches of all threads. Null when
	// there is no such process; a field inside is null when its file could
	// not be read, and KernelNote says why.
	BrokerKernel  *KernelPerMsg `json:"broker_kernel_per_msg"`
	ClientKernel  *KernelPerMsg `json:"client_kernel_per_msg"`
	ProcessKernel *KernelPerMsg `json:"process_kernel_per_msg,omitempty"`
	KernelNote    string        `json:"kernel_note,omitempty"`

	// SlaveLag (with Config.SlaveAddr): the time from a message's
	// visibility on the master to its visibility on the slave, sampled on
	// queue 0 every LagIntervalUs (each lag exact to ± that); pending
	// master samples the slave had not reached 5 s after the run, and the
	// probe's failed polls.
	SlaveLag        *Percentiles `json:"slave_lag_us,omitempty"`
	LagIntervalUs   int64        `json:"lag_interval_us,omitempty"`
	SlaveLagPending int          `json:"slave_lag_pending,omitempty"`
	SlaveLagErrors  int          `json:"slave_lag_errors,omitempty"`
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

// printLine writes the per-second line; backlog < 0 when no consumers run.
func printLine(w io.Writer, elapsed time.Duration, warm bool, msgs, bytes, recv, errs, backlog int64, send, e2e *hdr.Histogram) {
	tag := ""
	if warm {
		tag = " (warm-up)"
	}
	fmt.Fprintf(w, "%5.0fs  %9d msgs/s  %8.1f MiB/s", elapsed.Seconds(), msgs, float64(bytes)/(1<<20))
	if send.TotalCount() > 0 {
		fmt.Fprintf(w, "  send p50 %s p99 %s", usString(send.ValueAtQuantile(50)), usString(send.ValueAtQuantile(99)))
	}
	if backlog >= 0 {
		fmt.Fprintf(w, "  recv %d msgs/s  backlog %d", recv, backlog)
	}
	if e2e.TotalCount() > 0 {
		fmt.Fprintf(w, "  e2e p50 %s p99 %s", usString(e2e.ValueAtQuantile(50)), usString(e2e.ValueAtQuantile(99)))
	}
	fmt.Fprintf(w, "  errors %d%s\n", errs, tag)
}

// printSummary writes the human summary: the figures, each named for what
// it measured, and what the reader should make of them.
func printSummary(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n== %s: %s\n", r.Mode, r.Config)
	defer func() {
		if l := cpuLine(r); l != "" {
			fmt.Fprintln(w, l)
		}
		for _, l := range kernelLines(r) {
			fmt.Fprintln(w, l)
		}
	}()
	if l := storedLine(r); l != "" {
		defer fmt.Fprintln(w, l)
	}
	if r.Mode == ModeConsume {
		fmt.Fprintf(w, "drained %d of a backlog of %d messages in %.1fs: %.0f msgs/s, %.1f MiB/s, errors %d\n",
			r.Consumed, r.Backlog, r.Seconds, r.MsgsPerSec, r.MiBPerSec, r.Errors)
		fmt.Fprintln(w, "(consume mode measures the drain rate only: the messages were sent before the clock started, so a latency from their send time would be their age)")
		return
	}
	if r.Limit > 0 {
		fmt.Fprintf(w, "sent %d of --messages %d in all: %d acknowledged in the warm-up (not measured), the rest in the measured part below\n", r.Sent, r.Limit, r.WarmupMessages)
		if r.Sent < r.Limit {
			fmt.Fprintf(w, "the run ended (--duration or an interrupt) before all %d were sent\n", r.Limit)
		}
	}
	fmt.Fprintf(w, "messages %d in %.1fs: %.0f msgs/s, %.1f MiB/s, errors %d\n", r.Messages, r.Seconds, r.MsgsPerSec, r.MiBPerSec, r.Errors)
	if slices.Contains(r.Roles, "consumers") || slices.Contains(r.Roles, "readers") {
		fmt.Fprintf(w, "consumed %d: %.0f msgs/s; backlog at the end %d, mean %d\n", r.Consumed, r.ConsumeMsgsPerSec, r.Backlog, r.BacklogMean)
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
	if r.SlaveLag != nil {
		line("slave lag", *r.SlaveLag)
		fmt.Fprintf(w, "slave lag: from visible on the master to visible on the slave, queue 0 polled every %s (each lag ± that); %d samples the slave never reached, %d failed polls\n",
			usString(r.LagIntervalUs), r.SlaveLagPending, r.SlaveLagErrors)
	}
	if r.MaxRate > 0 {
		fmt.Fprintf(w, "highest rate with p99 send latency under the bound: %.0f msgs/s\n", r.MaxRate)
	}
	for _, n := range notes(r) {
		fmt.Fprintln(w, "note:", n)
	}
}

// notes says how to read a result's latencies.
func notes(r *Result) []string {
	var out []string
	switch {
	case r.TargetRate > 0 && r.RateReached:
		out = append(out, fmt.Sprintf("fixed rate: latencies count from each message's intended send time, so a stall delays every message scheduled during it (no coordinated omission); they are latency at %.0f msgs/s", r.TargetRate))
	case r.TargetRate > 0:
		out = append(out, fmt.Sprintf("the broker did not sustain %.0f msgs/s: messages waited to be sent, and the latencies, counted from the intended send times, include that wait; lower --rate to measure latency", r.TargetRate))
	case r.ClosedLoop && r.MaxRate == 0:
		out = append(out, "closed loop: producers send as fast as acknowledgements return, so msgs/s is the throughput and send-to-ack is latency at saturation, not at a normal load; use --rate for latency")
	}
	if r.ConsumersBehind {
		ms := 0.0
		if r.ConsumeMsgsPerSec > 0 {
			ms = float64(r.BacklogMean) / r.ConsumeMsgsPerSec * 1000
		}
		out = append(out, fmt.Sprintf("the consumers fell behind (on average %d messages waited for them, %.0f ms of consumption): the end-to-end figures measure that queue, not the broker's latency", r.BacklogMean, ms))
	} else if r.ClosedLoop && r.E2ELatency.Count > 0 {
		out = append(out, "closed loop: end-to-end includes any wait for the consumers; it measures latency only while they keep up, as they did in this run")
	}
	return out
}

// roles names what a mode runs.
func roles(c Config) []string {
	switch c.Mode {
	case ModeProduce:
		return []string{"producers"}
	case ModeConsume:
		return []string{"consumers"}
	case ModeStore:
		return []string{"writers", "readers"}
	}
	return []string{"producers", "consumers"}
}

// describe is the run's header: what ran, against what, at which rate.
func describe(c Config, rate float64) string {
	var b strings.Builder
	switch c.Mode {
	case ModeProduce:
		fmt.Fprintf(&b, "size %d B, %d producers x %d in flight, batch %d, %d queues", c.Size, c.Producers, c.Inflight, c.Batch, c.Queues)
	case ModeE2E:
		fmt.Fprintf(&b, "size %d B, %d producers x %d in flight, batch %d, %d consumers, %d queues", c.Size, c.Producers, c.Inflight, c.Batch, c.Consumers, c.Queues)
	case ModeConsume:
		fmt.Fprintf(&b, "size %d B, %d consumers draining a backlog of %d messages, %d queues", c.Size, c.Consumers, c.Messages, c.Queues)
	case ModeStore:
		fmt.Fprintf(&b, "size %d B, %d writers (store.PutBatch) x %d in flight, batch %d, %d readers (store.Get), %d queues",
			c.Size, c.Producers, c.Inflight, c.Batch, c.Consumers, c.Queues)
	}
	if c.Protocol == ProtocolGRPC {
		b.WriteString(", gRPC")
	}
	if c.Driver != "" {
		fmt.Fprintf(&b, ", driver %s", c.Driver)
	}
	if c.Addr != "" {
		fmt.Fprintf(&b, ", broker %s", c.Addr)
	} else {
		target := "embedded broker"
		if c.ChildBroker {
			target = "embedded broker in a child process"
		}
		if c.Mode == ModeStore {
			target = "store"
		}
		fmt.Fprintf(&b, ", %s, flush %s", target, c.Flush)
	}
	if c.Mode != ModeStore {
		b.WriteString(describeSecurity(c))
	}
	switch {
	case c.Mode == ModeConsume:
	case rate > 0:
		fmt.Fprintf(&b, ", fixed rate %.0f msgs/s", rate)
	default:
		b.WriteString(", closed loop")
	}
	return b.String()
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
