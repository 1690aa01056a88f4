// Package metrics exports a broker's metrics in Prometheus's text format
// (github.com/prometheus/client_golang), under RocketMQ 5's metric names
// where one exists (BrokerMetricsConstant, RemotingMetricsConstant: the
// names its Grafana dashboards query) and under an apogee_ prefix for the
// engine's own (commit log, flush, dispatch, disk, delay levels, timers,
// receive limits).
//
// # Nothing is counted per message for it
//
// Every value but one is read at scrape time by a custom
// prometheus.Collector (Exporter) from counters the broker keeps anyway:
// the lock-free, allocation-free runtime statistics of broker/core/stats
// (per topic and group messages and bytes), the core's and the store's
// atomic counters (core.EngineStats), the offset table and the store's
// queue offsets (core.ConsumerLags). A scrape costs O(topics + groups ×
// queues) and takes the tables' locks briefly, one at a time, like an
// admin request does; the send and pull paths are untouched. The one value
// observed per request is rocketmq_rpc_latency (RPCLatency), through the
// front end's ObserveRequest hook: a table read and two atomic adds, no
// lock, no allocation; its buckets are assembled at scrape time too.
//
// Constant labels on every series: cluster, node_type ("broker") and
// node_id (the broker name), as RocketMQ's exporter adds them.
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Options configure an Exporter.
type Options struct {
	// Core is the broker's core. Required.
	Core *core.Core
	// RPC is the request latency histogram the front end observes into
	// (nil: rocketmq_rpc_latency is not exported).
	RPC *RPCLatency
	// Remoting reads the remoting server's counters (receive limits); nil
	// leaves the apogee_remoting_* series out.
	Remoting func() remoting.ServerStats
	// GRPC reads the gRPC front end's counters (admission, size caps,
	// long polls); nil leaves the apogee_grpc_* series out.
	GRPC func() GRPCStats
	// NoProcessMetrics leaves out the Go runtime's and the process's
	// collectors (go_*, process_*), which are on by default.
	NoProcessMetrics bool
}

// Exporter is the broker's metrics: a Prometheus registry holding the
// scrape-time collector, the request histogram and (by default) the Go
// runtime's and process's collectors.
type Exporter struct {
	o   Options
	reg *prometheus.Registry
	d   descs
	// flushBase is the flushed offset when the exporter was made: the
	// sync counters count from the broker's start, the flushed offset
	// from the log's beginning.
	flushBase int64
}

// ConstLabels are the labels every series of a broker carries: cluster,
// node_type and node_id.
func ConstLabels(c *core.Core) prometheus.Labels {
	o := c.Options()
	return prometheus.Labels{"cluster": o.ClusterName, "node_type": "broker", "node_id": o.BrokerName}
}

// New builds the exporter and registers its collectors.
func New(o Options) (*Exporter, error) {
	e := &Exporter{o: o, reg: prometheus.NewRegistry(), flushBase: o.Core.Store().Stats().Log.FlushedOffset}
	e.d = newDescs(ConstLabels(o.Core), o.Remoting != nil, o.GRPC != nil)
	if err := e.reg.Register(collector{e}); err != nil {
		return nil, err
	}
	if o.RPC != nil {
		if err := e.reg.Register(o.RPC); err != nil {
			return nil, err
		}
	}
	if !o.NoProcessMetrics {
		if err := e.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, err
		}
		if err := e.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Registry is the exporter's registry (to add collectors, or to gather in
// tests).
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler serves the registry in Prometheus's text format (or OpenMetrics
// when the scraper asks for it).
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// descs are the scrape-time series' descriptions.
type descs struct {
	msgIn, bytesIn, msgOut, bytesOut                         *prometheus.Desc
	prodConns, consConns                                     *prometheus.Desc
	lagMsgs, lagLatency, readyMsgs, queueingLatency          *prometheus.Desc
	dlq, commits, rollbacks, half, perm                      *prometheus.Desc
	logBytes, logSegments, logWritten, logUnflushed          *prometheus.Desc
	logMin, flushLatency, flushBatch, flushMax               *prometheus.Desc
	dispatchLag, dispatchErrs, lagWaits                      *prometheus.Desc
	diskRatio, diskTotal, diskFree, diskFull, diskRefused    *prometheus.Desc
	sendReqs, sendErrs, busy, inflight                       *prometheus.Desc
	pullReqs, pullFound, sendBacks                           *prometheus.Desc
	delayed, delayedDelivered, delayedPending                *prometheus.Desc
	timers, timersFired, timersPending                       *prometheus.Desc
	halfWaiting, popMsgs, popAcks, popInflight               *prometheus.Desc
	conns, topics, groups, uptime                            *prometheus.Desc
	lost, scrubBad                                           *prometheus.Desc
	replicas, replicaLag, replicaInSync, replicated, resets  *prometheus.Desc
	rmConns, rmFrameTimeouts, rmSlow, rmBudgetCloses, rmBusy *prometheus.Desc
	rmInUse, rmWaits                                         *prometheus.Desc
	grpcStreams, grpcRefused, grpcClients                    *prometheus.Desc
	grpcHeld, grpcHeldTotal, grpcHeldRefused                 *prometheus.Desc
	grpcRenewing, grpcRenewals, grpcRenewRefused             *prometheus.Desc
}

func newDescs(cl prometheus.Labels, withRemoting, withGRPC bool) descs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	out := descs{
		msgIn:           d("rocketmq_messages_in_total", "Messages stored, by topic.", "topic", "is_system"),
		bytesIn:         d("rocketmq_throughput_in_total", "Message body bytes stored, by topic.", "topic", "is_system"),
		msgOut:          d("rocketmq_messages_out_total", "Messages delivered to consumers by pulls, by topic and group.", "topic", "consumer_group", "is_retry", "is_system"),
		bytesOut:        d("rocketmq_throughput_out_total", "Message bytes delivered to consumers by pulls, by topic and group.", "topic", "consumer_group", "is_retry", "is_system"),
		prodConns:       d("rocketmq_producer_connections", "Live producer connections, by client language and version.", "language", "version"),
		consConns:       d("rocketmq_consumer_connections", "Live consumer connections, by group, client language and version and consume mode.", "consumer_group", "language", "version", "consume_mode"),
		lagMsgs:         d("rocketmq_consumer_lag_messages", "Messages stored but not committed by the group (queue max offset less committed offset, summed over the topic's queues).", "topic", "consumer_group", "is_retry", "is_system"),
		lagLatency:      d("rocketmq_consumer_lag_latency", "Age in ms of the group's oldest uncommitted message of the topic (0 without a backlog).", "topic", "consumer_group", "is_retry", "is_system"),
		readyMsgs:       d("rocketmq_consumer_ready_messages", "Messages ready to be consumed (Apogee does not track pull offsets apart from committed ones: equal to the lag).", "topic", "consumer_group", "is_retry", "is_system"),
		queueingLatency: d("rocketmq_consumer_queueing_latency", "Age in ms of the oldest ready message (equal to the lag latency, as above).", "topic", "consumer_group", "is_retry", "is_system"),
		dlq:             d("rocketmq_send_to_dlq_messages_total", "Messages moved to a dead-letter topic (every group)."),
		commits:         d("rocketmq_commit_messages_total", "Transactions committed."),
		rollbacks:       d("rocketmq_rollback_messages_total", "Transactions rolled back."),
		half:            d("rocketmq_half_messages", "Half (prepared) transaction messages unresolved now."),
		perm:            d("rocketmq_broker_permission", "The broker's permission (6 read-write, 4 read-only, 2 write-only)."),

		logBytes:         d("apogee_commitlog_bytes", "Bytes the commit log's retained segments hold (written end less oldest offset)."),
		logSegments:      d("apogee_commitlog_segments", "Commit-log segment files."),
		logWritten:       d("apogee_commitlog_written_offset_bytes", "The commit log's written end (a global byte offset)."),
		logMin:           d("apogee_commitlog_min_offset_bytes", "The commit log's oldest retained offset."),
		logUnflushed:     d("apogee_commitlog_unflushed_bytes", "Bytes written but not yet synced to disk."),
		flushLatency:     d("apogee_flush_duration_seconds", "Commit-log syncs (group commits): their count and total time since start."),
		flushBatch:       d("apogee_flush_batch_bytes", "Bytes made durable per commit-log sync (group commit batch size): count of syncs, sum of bytes since start."),
		flushMax:         d("apogee_flush_duration_max_seconds", "The slowest commit-log sync since start."),
		dispatchLag:      d("apogee_dispatch_lag_bytes", "Commit-log bytes written but not yet dispatched to consume queues and the index (invisible to consumers)."),
		dispatchErrs:     d("apogee_dispatch_errors_total", "Records the dispatcher could not dispatch."),
		lagWaits:         d("apogee_put_dispatch_waits_total", "Puts that waited for the dispatcher to come back within its maximum lag."),
		diskRatio:        d("apogee_disk_usage_ratio", "Used fraction of the file system holding the data directory (RocketMQ's commitLogDiskRatio)."),
		diskTotal:        d("apogee_disk_total_bytes", "Size of the file system holding the data directory."),
		diskFree:         d("apogee_disk_free_bytes", "Bytes available on the file system holding the data directory."),
		diskFull:         d("apogee_disk_full", "1 while appends fail for lack of disk space."),
		diskRefused:      d("apogee_disk_full_refusals_total", "Appends refused for lack of disk space."),
		sendReqs:         d("apogee_send_requests_total", "Send requests handled."),
		sendErrs:         d("apogee_send_errors_total", "Send requests answered with an error."),
		busy:             d("apogee_send_busy_rejects_total", "Sends refused with SYSTEM_BUSY: the in-flight byte budget was full or the store stalled."),
		inflight:         d("apogee_send_inflight_bytes", "Message bytes of sends admitted and not yet answered."),
		pullReqs:         d("apogee_pull_requests_total", "Pull requests handled."),
		pullFound:        d("apogee_pull_found_total", "Pull requests that found messages."),
		sendBacks:        d("apogee_send_backs_total", "Messages consumers sent back for retry."),
		delayed:          d("apogee_delayed_messages_total", "Messages routed to the delay levels since start."),
		delayedDelivered: d("apogee_delayed_delivered_total", "Delayed messages delivered to their topic since start."),
		delayedPending:   d("apogee_delayed_messages_pending", "Delayed messages waiting in the delay levels' queues."),
		timers:           d("apogee_timer_messages_total", "Messages routed to the timer wheel since start."),
		timersFired:      d("apogee_timers_fired_total", "Timer messages delivered since start."),
		timersPending:    d("apogee_timers_pending", "Timer messages loaded and waiting for their time."),
		halfWaiting:      d("apogee_half_messages_waiting", "Unresolved half messages whose last check found no live producer."),
		popMsgs:          d("apogee_pop_messages_total", "Messages handed out by POP (redeliveries included)."),
		popAcks:          d("apogee_pop_acks_total", "POP acknowledgements."),
		popInflight:      d("apogee_pop_inflight_messages", "POP messages in flight (invisible, unacknowledged) now."),
		conns:            d("apogee_client_connections", "Client connections registered by heartbeat."),
		topics:           d("apogee_topics", "Topics in the topic table."),
		groups:           d("apogee_groups", "Groups with live members.", "kind"),
		uptime:           d("apogee_uptime_seconds", "Time since the broker started."),
		lost:             d("apogee_store_lost_messages", "Messages recovery found lost from synced data at the last start (damage, not an unsynced tail)."),
		scrubBad:         d("apogee_scrub_bad_records_total", "Damaged records the background scrubber found."),
		replicas:         d("apogee_replicas", "Slaves connected to this master's replication stream."),
		replicaLag:       d("apogee_replica_lag_bytes", "Commit-log bytes a connected slave has not yet acknowledged.", "replica"),
		replicaInSync:    d("apogee_replica_in_sync", "1 while a connected slave is within the maximum replica gap of the log's end.", "replica"),
		replicated:       d("apogee_replicated_bytes_total", "Bytes this slave appended from its master's stream."),
		resets:           d("apogee_replica_resets_total", "Times this slave's log started over from its master's oldest segment."),
	}
	if withRemoting {
		out.rmConns = d("apogee_remoting_connections", "Open remoting connections.")
		out.rmFrameTimeouts = d("apogee_remoting_frame_timeouts_total", "Connections closed: a frame was not received within the frame timeout.")
		out.rmSlow = d("apogee_remoting_slow_senders_total", "Connections closed: a frame arrived below the minimum receive rate.")
		out.rmBudgetCloses = d("apogee_remoting_budget_closes_total", "Connections closed: no room in the receive budget before the frame's deadline.")
		out.rmBusy = d("apogee_remoting_budget_exhaustions_total", "Times the process-wide receive budget became exhausted.")
		out.rmInUse = d("apogee_remoting_budget_in_use_bytes", "Bytes reserved in the receive budget now.")
		out.rmWaits = d("apogee_remoting_budget_waits_total", "Frames that waited for room in the receive budget.")
	}
	if withGRPC {
		out.grpcStreams = d("apogee_grpc_streams_total", "gRPC calls (streams) whose headers the front end admitted or refused.")
		out.grpcRefused = d("apogee_grpc_refused_total", "gRPC calls refused before their method ran, by reason: authentication (from the headers), budget (no room in the receive budget), request_timeout (the request did not arrive in time), message_size (a request or answer beyond the size caps).", "reason")
		out.grpcClients = d("apogee_grpc_clients", "RocketMQ 5 clients registered with the gRPC front end now.")
		out.grpcHeld = d("apogee_grpc_long_polls", "gRPC receives and pulls held waiting for messages now.")
		out.grpcHeldTotal = d("apogee_grpc_long_polls_total", "gRPC receives and pulls held since start.")
		out.grpcHeldRefused = d("apogee_grpc_long_polls_refused_total", "gRPC receives and pulls refused (TOO_MANY_REQUESTS), by the bound they met: broker, connection, client.", "bound")
		out.grpcRenewing = d("apogee_grpc_renewing", "PushConsumer (auto_renew) deliveries whose invisibility the gRPC front end renews now.")
		out.grpcRenewals = d("apogee_grpc_renewals_total", "Renewals of auto_renew deliveries, by result: renewed, failed, released (their client terminated or lost its connection).", "result")
		out.grpcRenewRefused = d("apogee_grpc_renew_refused_total", "gRPC auto_renew receives refused (TOO_MANY_REQUESTS): the client held as many renewed deliveries as the per-client bound.")
	}
	return out
}

// collector reads everything at scrape time.
type collector struct{ e *Exporter }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.e.d
	for _, x := range []*prometheus.Desc{d.msgIn, d.bytesIn, d.msgOut, d.bytesOut, d.prodConns, d.consConns,
		d.lagMsgs, d.lagLatency, d.readyMsgs, d.queueingLatency, d.dlq, d.commits, d.rollbacks, d.half, d.perm,
		d.logBytes, d.logSegments, d.logWritten, d.logMin, d.logUnflushed, d.flushLatency, d.flushBatch, d.flushMax,
		d.dispatchLag, d.dispatchErrs, d.lagWaits, d.diskRatio, d.diskTotal, d.diskFree, d.diskFull, d.diskRefused,
		d.sendReqs, d.sendErrs, d.busy, d.inflight, d.pullReqs, d.pullFound, d.sendBacks,
		d.delayed, d.delayedDelivered, d.delayedPending, d.timers, d.timersFired, d.timersPending,
		d.halfWaiting, d.popMsgs, d.popAcks, d.popInflight, d.conns, d.topics, d.groups, d.uptime, d.lost, d.scrubBad,
		d.replicas, d.replicaLag, d.replicaInSync, d.replicated, d.resets,
		d.rmConns, d.rmFrameTimeouts, d.rmSlow, d.rmBudgetCloses, d.rmBusy, d.rmInUse, d.rmWaits,
		d.grpcStreams, d.grpcRefused, d.grpcClients, d.grpcHeld, d.grpcHeldTotal, d.grpcHeldRefused,
		d.grpcRenewing, d.grpcRenewals, d.grpcRenewRefused} {
		if x != nil {
			ch <- x
		}
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	e, d := c.e, c.e.d
	co := e.o.Core
	system := map[string]bool{}
	for _, t := range co.Admin().SystemTopics() {
		system[t] = true
	}
	isSystem := func(t string) string {
		return strconv.FormatBool(system[t] || strings.HasPrefix(t, "rmq_sys_") || strings.HasPrefix(t, "%DLQ%") ||
			strings.HasPrefix(t, "%RETRY%") || strings.HasPrefix(t, "RMQ_SYS_"))
	}
	isRetry := func(t string) string { return strconv.FormatBool(strings.HasPrefix(t, "%RETRY%")) }
	counter := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, lv...)
	}
	gauge := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
	}

	// Messages and bytes in and out: the runtime statistics' cumulative
	// counters (the same items VIEW_BROKER_STATS_DATA samples).
	rs := co.Admin().Stats()
	rs.TopicPut.Each(func(k stats.Key, t stats.Totals) { counter(d.msgIn, float64(t.Value), k.Topic, isSystem(k.Topic)) })
	rs.TopicPutSize.Each(func(k stats.Key, t stats.Totals) { counter(d.bytesIn, float64(t.Value), k.Topic, isSystem(k.Topic)) })
	rs.GroupGet.Each(func(k stats.Key, t stats.Totals) {
		counter(d.msgOut, float64(t.Value), k.Topic, k.Group, isRetry(k.Topic), isSystem(k.Topic))
	})
	rs.GroupGetSize.Each(func(k stats.Key, t stats.Totals) {
		counter(d.bytesOut, float64(t.Value), k.Topic, k.Group, isRetry(k.Topic), isSystem(k.Topic))
	})

	// Connections.
	type lv struct{ a, b, c, d string }
	prod := map[lv]int{}
	for _, infos := range co.Admin().AllProducers() {
		for _, p := range infos {
			prod[lv{a: p.Language, b: versionLabel(p.Version)}]++
		}
	}
	for k, n := range prod {
		gauge(d.prodConns, float64(n), k.a, k.b)
	}
	for _, g := range co.Admin().ConsumerGroupNames() {
		info, err := co.Admin().ConsumerGroupInfo(g)
		if err != nil {
			continue
		}
		cons := map[lv]int{}
		for _, m := range info.Connections {
			cons[lv{a: g, b: m.Language, c: versionLabel(m.Version), d: consumeMode(info.ConsumeType)}]++
		}
		for k, n := range cons {
			gauge(d.consConns, float64(n), k.a, k.b, k.c, k.d)
		}
	}

	// Lag.
	now := time.Now().UnixMilli()
	for _, l := range co.Admin().ConsumerLags(core.LagOptions{Latency: true}) {
		lat := 0.0
		if l.OldestMs > 0 {
			lat = float64(max(now-l.OldestMs, 0))
		}
		labels := []string{l.Topic, l.Group, isRetry(l.Topic), isSystem(l.Topic)}
		gauge(d.lagMsgs, float64(l.Messages), labels...)
		gauge(d.lagLatency, lat, labels...)
		gauge(d.readyMsgs, float64(l.Messages), labels...)
		gauge(d.queueingLatency, lat, labels...)
	}

	// The engine.
	s := co.Admin().EngineStats()
	st := s.Store
	counter(d.dlq, float64(s.DeadLetters))
	counter(d.commits, float64(s.TxCommits))
	counter(d.rollbacks, float64(s.TxRollbacks))
	gauge(d.half, float64(s.HalfPending))
	gauge(d.perm, float64(s.BrokerPermission))
	gauge(d.logBytes, float64(st.Log.WrittenOffset-st.Log.MinOffset))
	gauge(d.logSegments, float64(st.Log.Segments))
	gauge(d.logWritten, float64(st.Log.WrittenOffset))
	gauge(d.logMin, float64(st.Log.MinOffset))
	gauge(d.logUnflushed, float64(max(st.Log.WrittenOffset-st.Log.FlushedOffset, 0)))
	ch <- prometheus.MustNewConstSummary(d.flushLatency, uint64(max(st.Log.SyncRounds, 0)), st.Log.SyncTime.Seconds(), nil)
	ch <- prometheus.MustNewConstSummary(d.flushBatch, uint64(max(st.Log.SyncRounds, 0)), float64(max(st.Log.FlushedOffset-e.flushBase, 0)), nil)
	gauge(d.flushMax, st.Log.MaxSyncTime.Seconds())
	gauge(d.dispatchLag, float64(st.DispatchLag))
	counter(d.dispatchErrs, float64(st.DispatchErrors))
	counter(d.lagWaits, float64(st.LagWaits))
	gauge(d.diskRatio, s.DiskRatio)
	gauge(d.diskTotal, float64(s.DiskTotal))
	gauge(d.diskFree, float64(s.DiskFree))
	gauge(d.diskFull, b2f(st.DiskFull))
	counter(d.diskRefused, float64(st.DiskFullRefusals))
	counter(d.sendReqs, float64(s.SendRequests))
	counter(d.sendErrs, float64(s.SendErrors))
	counter(d.busy, float64(s.BusyRejects))
	gauge(d.inflight, float64(s.InFlightBytes))
	counter(d.pullReqs, float64(s.PullRequests))
	counter(d.pullFound, float64(s.PullFound))
	counter(d.sendBacks, float64(s.SendBacks))
	counter(d.delayed, float64(s.Delayed))
	counter(d.delayedDelivered, float64(s.DelayedDelivered))
	gauge(d.delayedPending, float64(s.DelayedPending))
	counter(d.timers, float64(s.Timers))
	counter(d.timersFired, float64(s.TimersFired))
	gauge(d.timersPending, float64(s.TimersPending))
	gauge(d.halfWaiting, float64(s.HalfWaiting))
	counter(d.popMsgs, float64(s.PopMessages))
	counter(d.popAcks, float64(s.PopAcks))
	gauge(d.popInflight, float64(s.PopInFlight))
	gauge(d.conns, float64(s.Connections))
	gauge(d.topics, float64(s.Topics))
	gauge(d.groups, float64(s.ConsumerGroups), "consumer")
	gauge(d.groups, float64(s.ProducerGroups), "producer")
	gauge(d.uptime, co.Admin().Uptime().Seconds())
	gauge(d.lost, float64(st.LostMessages))
	counter(d.scrubBad, float64(st.ScrubBadRecords))
	gauge(d.replicas, float64(len(st.Replicas)))
	for _, r := range st.Replicas {
		gauge(d.replicaLag, float64(max(st.Log.WrittenOffset-r.Acked, 0)), r.Name)
		gauge(d.replicaInSync, b2f(r.InSync), r.Name)
	}
	counter(d.replicated, float64(st.ReplicatedBytes))
	counter(d.resets, float64(st.ReplicaResets))

	if e.o.Remoting != nil {
		r := e.o.Remoting()
		gauge(d.rmConns, float64(r.Connections))
		counter(d.rmFrameTimeouts, float64(r.FrameTimeouts))
		counter(d.rmSlow, float64(r.SlowSenders))
		counter(d.rmBudgetCloses, float64(r.BudgetCloses))
		counter(d.rmBusy, float64(r.Budget.Exhaustions))
		gauge(d.rmInUse, float64(r.Budget.InUse))
		counter(d.rmWaits, float64(r.Budget.Waits))
	}
	if e.o.GRPC != nil {
		g := e.o.GRPC()
		counter(d.grpcStreams, float64(g.Streams))
		counter(d.grpcRefused, float64(g.AuthRefused), "authentication")
		counter(d.grpcRefused, float64(g.BudgetRefused), "budget")
		counter(d.grpcRefused, float64(g.RequestTimeouts), "request_timeout")
		counter(d.grpcRefused, float64(g.SizeRefused), "message_size")
		gauge(d.grpcClients, float64(g.Clients))
		gauge(d.grpcHeld, float64(g.Held))
		counter(d.grpcHeldTotal, float64(g.HeldTotal))
		counter(d.grpcHeldRefused, float64(g.HeldRefusedBroker), "broker")
		counter(d.grpcHeldRefused, float64(g.HeldRefusedConn), "connection")
		counter(d.grpcHeldRefused, float64(g.HeldRefusedClient), "client")
		gauge(d.grpcRenewing, float64(g.Renewing))
		counter(d.grpcRenewals, float64(g.Renewals), "renewed")
		counter(d.grpcRenewals, float64(g.RenewFailures), "failed")
		counter(d.grpcRenewals, float64(g.RenewReleased), "released")
		counter(d.grpcRenewRefused, float64(g.RenewRefused))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// versionLabel is a client's version as RocketMQ's MQVersion names it
// (V4_9_4, V5_1_0).
func versionLabel(v int32) string { return protocol.VersionDesc(v) }

// consumeMode is RocketMQ's consume_mode label of a ConsumeType.
func consumeMode(t string) string {
	switch t {
	case "CONSUME_PASSIVELY", "PUSH":
		return "push"
	case "CONSUME_ACTIVELY", "PULL":
		return "pull"
	case "CONSUME_POP", "POP":
		return "pop"
	}
	return strings.ToLower(t)
}
