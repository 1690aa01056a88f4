// Package benchmark is Apogee's load generator: it drives a broker (or the
// storage engine alone) with producers and consumers and measures throughput
// and latency honestly.
//
// # What it measures
//
//   - Throughput: messages and MiB per second, per second while it runs and
//     over the measured part of the run (the warm-up is not counted).
//   - Send latency: from the moment a message should have been sent to its
//     acknowledgement. In closed-loop mode (--rate 0) that is the actual send
//     time; in fixed-rate mode it is the intended time on the schedule, so a
//     stalled broker cannot hide its stall by slowing the generator down
//     (coordinated omission). The lag between intended and actual send is
//     reported separately as the send delay.
//   - End-to-end latency: from the send time written into the first 8 bytes
//     of each body to the consumer's receipt (same clock, same machine).
//   - CPU per message: the broker process's and the generator's CPU time
//     over the measured part, per acknowledged (consume mode: consumed)
//     message; see cpu.go for where each clock is read.
//   - System calls and context switches per message, for the same
//     processes and messages: read-like and write-like calls (syscr and
//     syscw of /proc/PID/io; not epoll_wait, futex, madvise, msync or
//     fdatasync, which Linux counts nowhere in /proc) and the voluntary and
//     involuntary switches of all threads; see kernel.go.
//
// Latencies go into HdrHistogram histograms (µs, 3 significant digits), one
// per worker, swapped every second: a worker's hot path takes one
// uncontended mutex and never allocates.
//
// # Modes
//
//   - store: the storage engine alone (store.Put and store.Get), no network.
//   - produce: producers only.
//   - consume: produce --messages first, then time the consumers draining that
//     backlog.
//   - e2e (default): producers and consumers at once; consumers tail.
//
// With no address it starts an embedded broker in a temporary directory, in
// this process or (Config.ChildBroker) in a child process. RunTarget drives
// systems other than Apogee through the exported Target interface (the NATS
// JetStream driver in benchmark/natsdriver, a module of its own).
package benchmark
