package ctrlmode

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/apogeemq/apogee/store"
)

// The HA stream's epoch handshake (controller mode; RocketMQ's
// AutoSwitchHAService does the same in its own framing). Before its first
// report, a slave says hello on the HA connection:
//
//	magic "AHS1" (4), broker id (8), master epoch it follows (4),
//	entry count (4), count × (epoch (4), start offset (8)), log end (8)
//
// and the master answers:
//
//	status (4), master epoch (4), entry count (4), count × (epoch, start),
//	log end (8)
//
// Big-endian. Status 0 accepts; the slave then cuts its log back to the
// last offset both logs share (store.LastCommonOffset), drops its epoch
// entries from there, adopts the master's, and sends its first report (its
// log's end, now a prefix of the master's log). Status 1 (epochAhead): the
// slave follows a later epoch than the master's own, which therefore is no
// longer master: it refuses writes at once and asks the controller. Status 2
// (epochBehind): the slave follows an older epoch; it asks the controller
// and retries. The master knows the slave as replica "id:N" from then on
// (its acknowledgements count for the SyncStateSet by that name).

const (
	helloMagic = "AHS1"

	statusOK          = 0
	statusEpochAhead  = 1
	statusEpochBehind = 2

	// maxEntries bounds an epoch list on the wire.
	maxEntries = 1 << 16
)

// errStaleMaster: the master's answer says the slave follows a later
// epoch than the master's own.
var errStaleMaster = errors.New("ctrlmode: the master's epoch is older than the one this slave follows")

// errSlaveBehind: the master follows a later epoch than this slave.
var errSlaveBehind = errors.New("ctrlmode: this slave follows an older epoch than the master's")

type hello struct {
	id      int64
	epoch   int32
	entries []store.EpochEntry
	end     int64
}

func replicaName(id int64) string { return "id:" + strconv.FormatInt(id, 10) }

func putEntries(b []byte, es []store.EpochEntry) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(es)))
	for _, e := range es {
		b = binary.BigEndian.AppendUint32(b, uint32(e.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.StartOffset))
	}
	return b
}

func readEntries(r io.Reader) ([]store.EpochEntry, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	cnt := binary.BigEndian.Uint32(n[:])
	if cnt > maxEntries {
		return nil, fmt.Errorf("ctrlmode: handshake: %d epoch entries", cnt)
	}
	out := make([]store.EpochEntry, cnt)
	var e [12]byte
	for i := range out {
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return nil, err
		}
		out[i] = store.EpochEntry{Epoch: int32(binary.BigEndian.Uint32(e[:4])), StartOffset: int64(binary.BigEndian.Uint64(e[4:]))}
	}
	return out, nil
}

func (h hello) encode() []byte {
	b := []byte(helloMagic)
	b = binary.BigEndian.AppendUint64(b, uint64(h.id))
	b = binary.BigEndian.AppendUint32(b, uint32(h.epoch))
	b = putEntries(b, h.entries)
	return binary.BigEndian.AppendUint64(b, uint64(h.end))
}

func readHello(r io.Reader) (hello, error) {
	var h hello
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, fmt.Errorf("ctrlmode: handshake: %w", err)
	}
	if string(b[:4]) != helloMagic {
		return h, fmt.Errorf("ctrlmode: handshake: bad magic %q (a slave not in controller mode?)", b[:4])
	}
	h.id = int64(binary.BigEndian.Uint64(b[4:12]))
	h.epoch = int32(binary.BigEndian.Uint32(b[12:16]))
	var err error
	if h.entries, err = readEntries(r); err != nil {
		return h, fmt.Errorf("ctrlmode: handshake: %w", err)
	}
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return h, fmt.Errorf("ctrlmode: handshake: %w", err)
	}
	h.end = int64(binary.BigEndian.Uint64(b[:8]))
	return h, nil
}

type answer struct {
	status  uint32
	epoch   int32
	entries []store.EpochEntry
	end     int64
}

func (a answer) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, a.status)
	b = binary.BigEndian.AppendUint32(b, uint32(a.epoch))
	b = putEntries(b, a.entries)
	return binary.BigEndian.AppendUint64(b, uint64(a.end))
}

func readAnswer(r io.Reader) (answer, error) {
	var a answer
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return a, fmt.Errorf("ctrlmode: handshake answer: %w", err)
	}
	a.status = binary.BigEndian.Uint32(b[:4])
	a.epoch = int32(binary.BigEndian.Uint32(b[4:]))
	var err error
	if a.entries, err = readEntries(r); err != nil {
		return a, fmt.Errorf("ctrlmode: handshake answer: %w", err)
	}
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return a, fmt.Errorf("ctrlmode: handshake answer: %w", err)
	}
	a.end = int64(binary.BigEndian.Uint64(b[:]))
	return a, nil
}

// masterHandshake is the master's ha.MasterOptions.Handshake.
func (n *Node) masterHandshake(c net.Conn) (string, error) {
	h, err := readHello(bufio.NewReader(c))
	if err != nil {
		return "", err
	}
	inst := n.current()
	if inst == nil || !inst.master {
		return "", errors.New("ctrlmode: handshake on a broker that is not master")
	}
	epoch := inst.epoch.Load()
	a := answer{epoch: epoch, entries: n.epochs.Entries(), end: inst.b.Store().WrittenOffset()}
	switch {
	case h.epoch > epoch:
		a.status = statusEpochAhead
	case h.epoch < epoch:
		a.status = statusEpochBehind
	}
	if _, err := c.Write(a.encode()); err != nil {
		return "", fmt.Errorf("ctrlmode: handshake: %w", err)
	}
	switch a.status {
	case statusEpochAhead:
		// A slave has seen a later master epoch: this broker is no longer
		// master. Refuse writes now; the controller says what it is.
		n.fence(fmt.Sprintf("a slave (broker id %d) follows master epoch %d, this master's is %d", h.id, h.epoch, epoch))
		n.refresh()
		return "", fmt.Errorf("%w (slave %d at epoch %d, this master at %d)", errStaleMaster, h.id, h.epoch, epoch)
	case statusEpochBehind:
		return "", fmt.Errorf("%w (slave %d at epoch %d, this master at %d)", errSlaveBehind, h.id, h.epoch, epoch)
	}
	n.log.Info("ctrlmode: slave handshake", "slave", h.id, "epoch", h.epoch, "slaveEnd", h.end, "masterEnd", a.end)
	return replicaName(h.id), nil
}

// slaveHandshake is the slave's ha.SlaveOptions.Handshake: it truncates
// the replica to the last offset it shares with the master.
func (n *Node) slaveHandshake(c net.Conn) error {
	inst := n.current()
	if inst == nil || inst.master {
		return errors.New("ctrlmode: handshake on a broker that is not a slave")
	}
	st := inst.b.Store()
	local := n.epochs.Entries()
	epoch := inst.epoch.Load()
	h := hello{id: n.id, epoch: epoch, entries: local, end: st.WrittenOffset()}
	if _, err := c.Write(h.encode()); err != nil {
		return fmt.Errorf("ctrlmode: handshake: %w", err)
	}
	a, err := readAnswer(bufio.NewReader(c))
	if err != nil {
		return err
	}
	switch a.status {
	case statusOK:
	case statusEpochAhead:
		return fmt.Errorf("%w (master epoch %d, this slave follows %d)", errStaleMaster, a.epoch, epoch)
	case statusEpochBehind:
		n.refresh()
		return fmt.Errorf("%w (master epoch %d, this slave follows %d)", errSlaveBehind, a.epoch, epoch)
	default:
		return fmt.Errorf("ctrlmode: handshake: status %d", a.status)
	}
	off, ok := store.LastCommonOffset(local, h.end, a.entries, a.end)
	if !ok {
		off = noCommonEpoch(local, h.end, a.entries, a.end, st.LogMinOffset())
	}
	if off < h.end {
		tr, err := st.TruncateReplica(off)
		if err != nil {
			return fmt.Errorf("ctrlmode: truncate the replica to %d (the last offset shared with the master): %w", off, err)
		}
		n.truncated.Add(tr.Bytes)
		n.log.Warn("ctrlmode: replica truncated to the last offset it shares with the new master: its log had a suffix the master does not hold",
			"from", tr.From, "to", tr.To, "bytes", tr.Bytes, "messages", tr.Messages, "setAside", tr.Aside,
			"masterEpoch", a.epoch, "masterEnd", a.end)
	}
	// Adopt the master's epochs: those that begin at or below the log's end
	// describe bytes this replica holds or will receive from this master.
	if err := n.epochs.TruncateFrom(0); err != nil {
		return fmt.Errorf("ctrlmode: epoch file: %w", err)
	}
	for _, e := range a.entries {
		if err := n.epochs.Append(e.Epoch, e.StartOffset); err != nil {
			return fmt.Errorf("ctrlmode: epoch file: %w", err)
		}
	}
	n.log.Info("ctrlmode: following the master", "masterEpoch", a.epoch, "from", min(off, h.end), "masterEnd", a.end)
	return nil
}

// noCommonEpoch is where a replica with no epoch in common with its master
// is cut: a replica without epochs (its log came from a master before
// controller mode) keeps what lies below the master's first epoch; one
// whose epochs all differ keeps nothing (its log's minimum: the master
// streams from there, or from its own oldest segment).
func noCommonEpoch(local []store.EpochEntry, localEnd int64, remote []store.EpochEntry, remoteEnd, localMin int64) int64 {
	if len(local) == 0 {
		first := remoteEnd
		if len(remote) > 0 {
			first = remote[0].StartOffset
		}
		return max(min(localEnd, first), localMin)
	}
	return localMin
}
