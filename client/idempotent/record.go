package idempotent

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A BrokerStore keeps each state change of a key as one message (a record) in its
// topic. The record's body, version 1, is
//
//	byte    version (1)
//	byte    op: 1 begin, 2 renew, 3 done, 4 release
//	int64   duration in milliseconds, big-endian: the lease (begin, renew) or the
//	        TTL (done); 0 for release
//	uvarint owner length, owner bytes
//	uvarint key length, key bytes
//
// and nothing after. Its KEYS property is the key's index key (indexKey), so the
// broker's hash index finds every record of a key.

type op uint8

const (
	opBegin   op = 1
	opRenew   op = 2
	opDone    op = 3
	opRelease op = 4
)

func (o op) String() string {
	switch o {
	case opBegin:
		return "BEGIN"
	case opRenew:
		return "RENEW"
	case opDone:
		return "DONE"
	case opRelease:
		return "RELEASE"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

const (
	recordVersion = 1
	// MaxKeyLen bounds the keys a BrokerStore accepts (bytes).
	MaxKeyLen = 16 << 10
	// MaxOwnerLen bounds owner names a BrokerStore accepts (bytes).
	MaxOwnerLen = 1 << 10
	// maxPlainIndexKey is the longest key used as its own index key.
	maxPlainIndexKey = 128
)

var errBadRecord = errors.New("idempotent: malformed state record")

// record is a decoded record body. owner and key alias the decoded bytes.
type record struct {
	op    op
	dur   int64 // ms
	owner []byte
	key   []byte
}

// appendRecord appends the encoding of r to dst.
func appendRecord(dst []byte, r *record) []byte {
	dst = append(dst, recordVersion, byte(r.op))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.dur))
	dst = binary.AppendUvarint(dst, uint64(len(r.owner)))
	dst = append(dst, r.owner...)
	dst = binary.AppendUvarint(dst, uint64(len(r.key)))
	return append(dst, r.key...)
}

// decodeRecord decodes a record body. It never panics and allocates nothing: the
// record's owner and key alias b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 10 {
		return r, fmt.Errorf("%w: %d bytes", errBadRecord, len(b))
	}
	if b[0] != recordVersion {
		return r, fmt.Errorf("%w: version %d", errBadRecord, b[0])
	}
	r.op = op(b[1])
	if r.op < opBegin || r.op > opRelease {
		return r, fmt.Errorf("%w: op %d", errBadRecord, b[1])
	}
	r.dur = int64(binary.BigEndian.Uint64(b[2:10]))
	if r.dur < 0 {
		return r, fmt.Errorf("%w: negative duration", errBadRecord)
	}
	rest := b[10:]
	var ok bool
	if r.owner, rest, ok = lenPrefixed(rest, MaxOwnerLen); !ok {
		return r, fmt.Errorf("%w: owner", errBadRecord)
	}
	if r.key, rest, ok = lenPrefixed(rest, MaxKeyLen); !ok {
		return r, fmt.Errorf("%w: key", errBadRecord)
	}
	if len(rest) != 0 {
		return r, fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(rest))
	}
	return r, nil
}

func lenPrefixed(b []byte, max int) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(max) || n > uint64(len(b)-w) {
		return nil, b, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// indexKey is the KEYS value a key's records are indexed under: the key itself
// when it is short and has no byte that KEYS or properties cannot hold (space,
// 0x01, 0x02), otherwise "idem-" and the hex SHA-256 of the key. Records carry the
// whole key in their body, and readers compare it, so index keys that collide
// (with each other or with other messages' ids) do no harm.
func indexKey(key string) string {
	plain := len(key) <= maxPlainIndexKey
	for i := 0; plain && i < len(key); i++ {
		switch key[i] {
		case ' ', 0x01, 0x02:
			plain = false
		}
	}
	if plain {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "idem-" + hex.EncodeToString(sum[:])
}

// entry is a record of one key as read back from the broker: the record and where
// and when the broker stored it.
type entry struct {
	op    op
	dur   int64  // ms
	owner string // the writer
	ts    int64  // the broker's store timestamp, ms
	host  string // the broker's raw store host (orders records of one broker)
	off   int64  // commit-log offset on that broker
	id    string // the record message's UNIQ_KEY
}

// fstate is a key's state folded from its records.
type fstate struct {
	kind    State // StateAbsent, StateProcessing or StateDone
	owner   string
	expires int64 // ms, broker time
}

func (f *fstate) live(t int64) bool { return f.kind != StateAbsent && f.expires > t }

// apply applies one record, stored at e.ts, to the state. A record that was not a
// legal transition when it was stored is ignored: a begin while another owner's
// lease or a done TTL was live (the loser of a race), a renew, done or release by
// an owner that did not hold the key. Every reader that sees the same records in
// the same order therefore folds them to the same state, and the first begin in a
// broker's log wins a race.
func (f *fstate) apply(e *entry) {
	t := e.ts
	switch e.op {
	case opBegin:
		if !f.live(t) {
			*f = fstate{kind: StateProcessing, owner: e.owner, expires: t + e.dur}
		}
	case opRenew:
		if f.kind == StateProcessing && f.owner == e.owner && f.expires > t {
			f.expires = t + e.dur
		}
	case opDone:
		if !f.live(t) || f.owner == e.owner {
			*f = fstate{kind: StateDone, owner: e.owner, expires: t + e.dur}
		}
	case opRelease:
		if (f.kind == StateProcessing && f.owner == e.owner) || !f.live(t) {
			*f = fstate{}
		}
	}
}

// at reports the state as TryBegin at time now (ms) finds it.
func (f *fstate) at(now int64) State {
	switch {
	case f.kind == StateAbsent:
		return StateAbsent
	case f.expires > now:
		return f.kind
	case f.kind == StateProcessing:
		return StateExpired
	}
	return StateAbsent
}

// fold folds entries, which must be in log order.
func fold(es []entry) fstate {
	var f fstate
	for i := range es {
		f.apply(&es[i])
	}
	return f
}

// orderEntries puts the entries of one key in log order: by commit-log offset
// within each broker (store host), and the brokers' runs merged by store
// timestamp. It removes entries read twice (same host and offset).
func orderEntries(es []entry) []entry {
	sortEntries(es)
	out := es[:0]
	for i := range es {
		if len(out) > 0 && out[len(out)-1].host == es[i].host && out[len(out)-1].off == es[i].off {
			continue
		}
		out = append(out, es[i])
	}
	es = out
	// One broker (the usual case: a key's records all go to one queue) needs no
	// merge.
	if len(es) == 0 || es[0].host == es[len(es)-1].host {
		return es
	}
	var runs [][]entry
	for start := 0; start < len(es); {
		end := start + 1
		for end < len(es) && es[end].host == es[start].host {
			end++
		}
		runs = append(runs, es[start:end])
		start = end
	}
	merged := make([]entry, 0, len(es))
	for {
		best := -1
		for i, r := range runs {
			if len(r) > 0 && (best < 0 || r[0].ts < runs[best][0].ts) {
				best = i
			}
		}
		if best < 0 {
			return merged
		}
		merged = append(merged, runs[best][0])
		runs[best] = runs[best][1:]
	}
}

func sortEntries(es []entry) {
	slices.SortFunc(es, func(a, b entry) int {
		if c := strings.Compare(a.host, b.host); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
}
