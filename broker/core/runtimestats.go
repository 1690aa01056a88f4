package core

import (
	"fmt"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// countGet counts a pull that found messages into the runtime statistics:
// its messages, their bytes, and the latency of its first message (from
// its store time to now). It neither allocates nor locks.
func (c *Core) countGet(res *PullResult, g *store.GetResult) {
	var bytes int64
	for _, r := range res.Records {
		bytes += int64(len(r))
	}
	var latency int64
	if len(res.Records) > 0 {
		if ts, ok := recordStoreTime(res.Records[0]); ok {
			latency = time.Now().UnixMilli() - ts
		}
	}
	c.rstats.Get(res.Topic, res.group, int64(len(res.Records)), bytes, latency)
}

// recordStoreTime reads STORETIMESTAMP from an encoded record.
func recordStoreTime(rec []byte) (int64, bool) {
	if len(rec) < message.OffSysFlag+4 {
		return 0, false
	}
	sysFlag := int32(uint32(rec[message.OffSysFlag])<<24 | uint32(rec[message.OffSysFlag+1])<<16 |
		uint32(rec[message.OffSysFlag+2])<<8 | uint32(rec[message.OffSysFlag+3]))
	off := message.StoreTimestampOffset(sysFlag)
	if len(rec) < off+8 {
		return 0, false
	}
	var ts int64
	for _, b := range rec[off : off+8] {
		ts = ts<<8 | int64(b)
	}
	return ts, true
}

// Thread-pool capacities the Java broker reports by default
// (BrokerConfig's *ThreadPoolQueueCapacity). Apogee serves requests on
// goroutines and has no such queues; their sizes are always 0.
var javaPoolCapacities = map[string]string{
	"sendThreadPoolQueueCapacity":           "10000",
	"pullThreadPoolQueueCapacity":           "100000",
	"litePullThreadPoolQueueCapacity":       "100000",
	"queryThreadPoolQueueCapacity":          "20000",
	"ackThreadPoolQueueCapacity":            "100000",
	"EndTransactionThreadPoolQueueCapacity": "100000",
}

// statsRuntimeInfo adds to RuntimeInfo the keys of the Java broker's
// GET_BROKER_RUNTIME_INFO that its tools read (clusterList, brokerStatus,
// the dashboard and rocketmq-exporter): the rates (putTps, getFoundTps,
// getMissTps, getTotalTps, getTransferredTps, each "10s 1min 10min" as
// StoreStatsService prints them), today's totals at midnight, disk ratios,
// and the Java broker's thread-pool keys (0: Apogee has no pools).
func (c *Core) statsRuntimeInfo(m map[string]string, st store.Stats) {
	rs := c.rstats
	f := protocol.JavaDouble
	triple := func(get func(stats.Window) float64) string {
		return fmt.Sprintf("%.2f %.2f %.2f", get(stats.Window10s), get(stats.Window1m), get(stats.Window10m))
	}
	put := func(w stats.Window) float64 { return rs.BrokerPut(w).TPS }
	found := func(w stats.Window) float64 {
		s := rs.BrokerGet(w)
		if s.Times == 0 {
			return 0
		}
		return s.TPS * float64(s.Times) / float64(max(s.Sum, 1))
	}
	total := func(w stats.Window) float64 { return rs.Pulls(w).TPS }
	miss := func(w stats.Window) float64 { return max(total(w)-found(w), 0) }
	transferred := func(w stats.Window) float64 { return rs.BrokerGet(w).TPS }
	m["putTps"] = triple(put)
	m["getFoundTps"] = triple(found)
	m["getMissTps"] = triple(miss)
	m["getTotalTps"] = triple(total)
	m["getTransferredTps"] = triple(transferred)
	m["getTransferedTps"] = m["getTransferredTps"] // RocketMQ 4's spelling, read by its clusterList

	d := rs.Today()
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	// Now and the mornings from the same counters (BROKER_PUT_NUMS and
	// BROKER_GET_NUMS: producers' and consumers' messages, as the Java
	// broker counts them), so that now − morning is today's traffic.
	m["msgPutTotalTodayNow"] = i(d.PutNow)
	m["msgGetTotalTodayNow"] = i(d.GetNow)
	m["msgPutTotalYesterdayMorning"] = i(d.PutYesterdayMorning)
	m["msgPutTotalTodayMorning"] = i(d.PutTodayMorning)
	m["msgGetTotalYesterdayMorning"] = i(d.GetYesterdayMorning)
	m["msgGetTotalTodayMorning"] = i(d.GetTodayMorning)

	ratio, total64, free := diskSpace(c.opts.DataDir)
	m["commitLogDiskRatio"] = f(ratio)
	m["consumeQueueDiskRatio"] = f(ratio)
	m["commitLogDiskRatio_"+c.opts.DataDir+"/commitlog"] = f(ratio)
	m["commitLogDirCapacity"] = fmt.Sprintf("Total : %s, Free : %s.", humanBytes(total64), humanBytes(free))
	m["remainHowManyDataToFlush"] = humanBytes(max(st.Log.WrittenOffset-st.Log.FlushedOffset, 0))
	m["putMessageTimesTotal"] = i(max(st.Puts, 1))
	m["putMessageFailedTimes"] = i(st.PutErrors)
	m["putMessageAverageSize"] = f(float64(st.PutBytes) / float64(max(st.Puts, 1)))
	m["earliestMessageTimeStamp"] = i(c.earliestMessageTime(st))
	m["startAcceptSendRequestTimeStamp"] = "0"
	m["pageCacheLockTimeMills"] = "0"
	m["brokerActive"] = "true"
	m["remainTransientStoreBufferNumbs"] = strconv.Itoa(int(^uint32(0) >> 1))
	m["dispatchMaxBuffer"] = "0"
	m["putMessageEntireTimeMax"] = i(st.Log.MaxSyncTime.Milliseconds())
	m["getMessageEntireTimeMax"] = "0"
	for k, v := range javaPoolCapacities {
		m[k] = v
		size := k[:len(k)-len("Capacity")] + "Size"
		if k == "EndTransactionThreadPoolQueueCapacity" {
			size = "EndTransactionQueueSize"
		}
		m[size] = "0"
	}
	for _, p := range []string{"send", "pull", "query", "litePull", "ack"} {
		m[p+"ThreadPoolQueueHeadWaitTimeMills"] = "0"
	}
	tm := c.features().timers.Stats()
	m["timerReadBehind"] = "0"
	m["timerOffsetBehind"] = "0"
	m["timerCongestNum"] = strconv.Itoa(tm.Pending)
	m["timerEnqueueTps"] = "0.0"
	m["timerDequeueTps"] = "0.0"
}

// earliestMessageTime is the store time of the oldest record in the log
// (0 when it is empty).
func (c *Core) earliestMessageTime(st store.Stats) int64 {
	if st.Log.WrittenOffset <= st.Log.MinOffset {
		return 0
	}
	v, err := c.store.ReadMessage(st.Log.MinOffset)
	if err != nil {
		return 0
	}
	defer v.Release()
	ts, _ := recordStoreTime(v.Bytes())
	return ts
}

// humanBytes is MixAll.humanReadableByteCount(n, false): binary units with
// one decimal ("12.3 GiB").
func humanBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := "KMGTPE"
	v := float64(n)
	u := -1
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[u])
}
