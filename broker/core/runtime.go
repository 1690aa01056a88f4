package core

import (
	"strconv"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// RuntimeInfo returns the core's runtime numbers as GET_BROKER_RUNTIME_INFO
// (28) reports them (the Java broker's key names where one exists): the
// store's, the send and pull counters, the client registry's, the
// features'. A front end adds its own (held requests, its server's limits).
func (a Admin) RuntimeInfo() map[string]string {
	c := a.c
	st := c.store.Stats()
	conns, cgroups, pgroups := c.clients.counts()
	up := time.Since(c.start)
	delays, timers := c.features().sched.Stats(), c.features().timers.Stats()
	txs := c.features().tx.Stats()
	ps := c.features().pops.Stats()
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	m := map[string]string{
		"brokerVersionDesc": protocol.VersionDesc(protocol.DefaultVersion),
		"brokerVersion":     i(int64(protocol.DefaultVersion)),
		"brokerName":        c.opts.BrokerName,
		"clusterName":       c.opts.ClusterName,
		"brokerAddr":        c.opts.AdvertiseAddr,
		"bootTimestamp":     i(c.start.UnixMilli()),
		"runtime":           up.Round(time.Second).String(),
		// Every message the store took or returned, internal ones included
		// (delays, retries, timers, transactions, admin queries); the
		// RocketMQ keys msgPutTotalTodayNow and msgGetTotalTodayNow count
		// producers' and consumers' messages (statsRuntimeInfo).
		"storePutMessages":       i(st.Puts),
		"storeGetMessages":       i(st.Gets),
		"putMessageSizeTotal":    i(st.PutBytes),
		"getMessageSizeTotal":    i(st.GetBytes),
		"putMessageErrors":       i(st.PutErrors),
		"commitLogMinOffset":     i(st.Log.MinOffset),
		"commitLogMaxOffset":     i(st.Log.WrittenOffset),
		"commitLogFlushedOffset": i(st.Log.FlushedOffset),
		"commitLogSegments":      strconv.Itoa(st.Log.Segments),
		"dispatchBehindBytes":    i(st.DispatchLag),
		"dispatchErrors":         i(st.DispatchErrors),
		"dispatchStalls":         i(st.DispatchStalls),
		"flushSyncRounds":        i(st.Log.SyncRounds),
		"flushMaxSyncTimeMs":     i(st.Log.MaxSyncTime.Milliseconds()),
		"mappedQueueFiles":       strconv.Itoa(st.MappedQueueFiles),
		"sendRequests":           i(c.stats.sendRequests.Load()),
		"sendMessages":           i(c.stats.sendMessages.Load()),
		"sendErrors":             i(c.stats.sendErrors.Load()),
		"sendBusyRejects":        i(c.stats.busyRejects.Load()),
		"sendInFlightBytes":      i(c.inflight.Load()),
		"pullRequests":           i(c.stats.pullRequests.Load()),
		"pullFound":              i(c.stats.pullFound.Load()),
		"pullMessages":           i(c.stats.pullMessages.Load()),
		"clientConnections":      strconv.Itoa(conns),
		"consumerGroups":         strconv.Itoa(cgroups),
		"producerGroups":         strconv.Itoa(pgroups),
		"topics":                 strconv.Itoa(c.topics.count()),
		"notifiesSent":           i(c.stats.notifies.Load()),
		"configPersistErrors":    i(c.stats.persistErrors.Load()),
		"innerPuts":              i(c.stats.innerPuts.Load()),
		"sendBacks":              i(c.stats.sendBacks.Load()),
		"deadLetters":            i(c.stats.deadLetters.Load() + ps.DeadLetters),
		"delayedMessages":        i(c.stats.delayed.Load()),
		"delayedDelivered":       i(delays.Delivered),
		"timerMessages":          i(c.stats.timers.Load()),
		"timersFired":            i(timers.Fired),
		"timerRolls":             i(timers.Rolls),
		"timersPending":          strconv.Itoa(timers.Pending),
		"halfMessages":           i(txs.HalfMessages),
		"halfMessagesPending":    strconv.Itoa(txs.Pending),
		"halfMessagesWaiting":    strconv.Itoa(txs.Waiting),
		"transactionCommits":     i(txs.Commits),
		"transactionRollbacks":   i(txs.Rollbacks),
		"transactionChecks":      i(txs.Checks),
		"transactionCheckMaxed":  i(txs.CheckMaxed),
		// POP (broker/pop's Stats; held pops are the front end's).
		"popRequests":         i(ps.Pops),
		"popMessages":         i(ps.Popped),
		"popRedelivered":      i(ps.Redelivered),
		"popAcks":             i(ps.Acks),
		"popInvisibleChanges": i(ps.Changes),
		"popDeadLetters":      i(ps.DeadLetters),
		"popStaleHandles":     i(ps.StaleHandles),
		"popInFlight":         strconv.Itoa(ps.InFlight),
		// Integrity (store.Stats): what the last start found lost and rebuilt,
		// what reads skipped, the scrubber, disk pressure.
		"storeLostMessages":          i(st.LostMessages),
		"storeLostBytes":             i(st.LostBytes),
		"storeQueuesRebuilt":         i(st.QueuesRebuilt),
		"storeIndexFilesRebuilt":     i(st.IndexFilesRebuilt),
		"storeBadEntriesSkipped":     i(st.BadEntries),
		"storeLostEntriesSkipped":    i(st.LostEntriesSkipped),
		"scrubPasses":                i(st.ScrubPasses),
		"scrubBytes":                 i(st.ScrubBytes),
		"scrubBadRecords":            i(st.ScrubBadRecords),
		"scrubRepairedEntries":       i(st.ScrubRepairedEntries),
		"scrubMissingEntries":        i(st.ScrubMissingEntries),
		"scrubLastPass":              i(lastScrubMs(st.LastScrub)),
		"diskFull":                   strconv.FormatBool(st.DiskFull),
		"diskFullRefusals":           i(st.DiskFullRefusals),
		"diskPressureSegmentDeletes": i(st.PressureDeletes),
		"unindexedMessages":          i(st.Unindexed),
	}
	c.statsRuntimeInfo(m, st)
	c.autoCreate.addRuntimeInfo(m)
	return m
}

// lastScrubMs is the end of the last scrub pass in ms since the epoch, 0 if none.
func lastScrubMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// DelayOffsets returns the delay scanners' progress by delay level (1..n):
// the next offset of each level's queue to deliver (GET_ALL_DELAY_OFFSET,
// 45; config/delayOffset.json).
func (a Admin) DelayOffsets() map[int32]int64 {
	c := a.c
	offs := c.features().sched.Offsets()
	out := make(map[int32]int64, len(offs))
	for i, off := range offs {
		out[int32(i+1)] = off
	}
	return out
}
