package ctrlmode

import (
	"encoding/json"
	"math"

	"github.com/apogeemq/apogee/controller/wire"
)

// epochCache is GET_BROKER_EPOCH_CACHE's answer (mqadmin's getBrokerEpoch):
// the epoch file's entries, each ending where the next begins (the last
// at math.MaxInt64, Java's "open"), and the log's end, as RocketMQ's
// EpochEntryCache.
func (n *Node) epochCache() ([]byte, error) {
	entries := n.epochs.Entries()
	c := wire.EpochEntryCache{ClusterName: n.opts.ClusterName, BrokerName: n.opts.BrokerName, BrokerID: n.id,
		EpochList: make([]wire.EpochEntry, len(entries)), MaxOffset: n.status().MaxOffset}
	for i, e := range entries {
		end := int64(math.MaxInt64)
		if i+1 < len(entries) {
			end = entries[i+1].StartOffset
		}
		c.EpochList[i] = wire.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset, EndOffset: end}
	}
	return json.Marshal(c)
}
