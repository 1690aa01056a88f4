package controller

import (
	"sync"
	"time"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/remoting"
)

// Liveness is local to each node, never replicated (RocketMQ's
// DefaultBrokerHeartbeatManager): every node records the heartbeats it
// receives, and the leader decides with its own record. Brokers of Apogee's
// client send their heartbeats to every controller, so a new leader knows
// who is alive at once; for brokers it has not heard from since it became
// leader (a client that heartbeats the leader alone), the leader assumes the best for one heartbeat timeout before it declares
// a master dead.
//
// A connection close is evidence that outlives a change of leader: when
// the connection a broker's heartbeats were arriving on closes (the record
// still live at the close) and no heartbeat comes after it, the broker's
// process or its path to this node went away. Apogee's client heartbeats
// every controller, so every node, follower or leader, sees a dead
// broker's connections close; a new leader that recorded the close of the
// master's connection elects at its first scan instead of granting the
// master a heartbeat timeout. RocketMQ's brokers heartbeat every
// controller too and each node drops a broker's record when its channel
// closes (DefaultBrokerHeartbeatManager.onBrokerChannelClose); its JRaft
// controller replicates the closes through Raft instead.
// A record that merely stopped (no close seen) is still not evidence for a
// new leader: the broker may heartbeat the leader alone.

type liveKey struct {
	broker string
	id     int64
}

// liveInfo is what the last heartbeat of a broker said.
type liveInfo struct {
	cluster, addr string
	seen          time.Time // the last heartbeat
	expires       time.Time // dead from then on (seen + timeout, earlier after a close)
	epoch         int32
	maxOffset     int64
	confirm       int64
	priority      int32
	conn          *remoting.Conn // the connection the last heartbeat came on
	// closedLive: the connection of the last heartbeat closed while the
	// record was live, and nothing was heard since.
	closedLive bool
}

type liveness struct {
	mu sync.Mutex
	m  map[liveKey]*liveInfo
}

func (l *liveness) init() { l.m = map[liveKey]*liveInfo{} }

// heartbeat records h, received now on c.
func (l *liveness) heartbeat(h *wire.HeartbeatRequest, c *remoting.Conn, now time.Time, timeout time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := liveKey{h.BrokerName, h.BrokerID}
	e := l.m[k]
	if e == nil {
		e = &liveInfo{}
		l.m[k] = e
	}
	*e = liveInfo{cluster: h.ClusterName, addr: h.BrokerAddr, seen: now, expires: now.Add(timeout),
		epoch: h.Epoch, maxOffset: h.MaxOffset, confirm: h.ConfirmOffset, priority: h.ElectionPriority, conn: c}
}

// closed shortens the life of every broker whose last heartbeat came on c:
// dead after grace unless heard from again (a broker's client reconnects
// and heartbeats at once; a dead process never does).
func (l *liveness) closed(c *remoting.Conn, now time.Time, grace time.Duration) []liveKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []liveKey
	for k, e := range l.m {
		if e.conn == c {
			e.conn = nil
			e.closedLive = now.Before(e.expires)
			if t := now.Add(grace); t.Before(e.expires) {
				e.expires = t
			}
			keys = append(keys, k)
		}
	}
	return keys
}

// info returns a copy of the broker's record.
func (l *liveness) info(broker string, id int64) (liveInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[liveKey{broker, id}]
	if e == nil {
		return liveInfo{}, false
	}
	return *e, true
}

// alive reports whether the broker was heard from within its timeout.
func (l *liveness) alive(broker string, id int64, now time.Time) bool {
	e, ok := l.info(broker, id)
	return ok && now.Before(e.expires)
}

// forget drops the records of a group's replicas (CLEAN_BROKER_DATA).
func (l *liveness) forget(broker string, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.m {
		if k.broker != broker {
			continue
		}
		if len(ids) == 0 {
			delete(l.m, k)
			continue
		}
		for _, id := range ids {
			if k.id == id {
				delete(l.m, k)
			}
		}
	}
}

// maybeAlive is alive, or, for a broker this node has no current record of
// since it became leader at since, the benefit of the doubt until one
// heartbeat timeout after since. A record that was alive when this node
// took over is trusted when it expires (or its connection closes), and so
// is one whose connection closed while it was live, whenever that was (a
// broker that heartbeats this node and lives reconnects within the grace);
// one that had expired before without a close (left from an earlier term,
// by a broker that heartbeats the leader alone) is not evidence of
// anything.
func (n *Node) maybeAlive(broker string, id int64, now time.Time) bool {
	e, ok := n.live.info(broker, id)
	if ok && now.Before(e.expires) {
		return true
	}
	since := time.Unix(0, n.leaderSince.Load())
	if ok && (e.closedLive || !e.expires.Before(since)) {
		return false
	}
	return now.Before(since.Add(n.opts.HeartbeatTimeout))
}

// connClosed is the remoting server's OnClose callback.
func (n *Node) connClosed(c *remoting.Conn) {
	for _, k := range n.live.closed(c, time.Now(), n.opts.CloseGrace) {
		n.log.Info("controller: broker's connection closed; dead unless heard from again soon",
			"broker", k.broker, "id", k.id, "grace", n.opts.CloseGrace)
	}
}
