package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
)

// offsetStore keeps a group's consumed offsets: in memory, written out by persist.
// An offset is the next message to consume (the lowest unconsumed one).
type offsetStore interface {
	// read returns the stored offset of mq (from the broker or the file), -1 when
	// there is none.
	read(ctx context.Context, mq MessageQueue) (int64, error)
	// update sets the in-memory offset (only forward unless force).
	update(mq MessageQueue, off int64, force bool)
	// get returns the in-memory offset.
	get(mq MessageQueue) (int64, bool)
	// persist writes the offsets of mqs that changed since their last write and
	// calls done for each one written.
	persist(ctx context.Context, mqs []MessageQueue, done func(MessageQueue, int64)) error
	// remove forgets mq's in-memory offset.
	remove(mq MessageQueue)
}

type memOffsets struct {
	mu      sync.Mutex
	offsets map[MessageQueue]int64
	written map[MessageQueue]int64
}

func (m *memOffsets) update(mq MessageQueue, off int64, force bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.offsets[mq]; ok && !force && off < old {
		return
	}
	m.offsets[mq] = off
}

func (m *memOffsets) get(mq MessageQueue) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.offsets[mq]
	return o, ok
}

func (m *memOffsets) remove(mq MessageQueue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.offsets, mq)
	delete(m.written, mq)
}

// dirty returns the offsets of mqs that changed since their last write.
func (m *memOffsets) dirty(mqs []MessageQueue) map[MessageQueue]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[MessageQueue]int64{}
	for _, mq := range mqs {
		o, ok := m.offsets[mq]
		if !ok {
			continue
		}
		if w, ok := m.written[mq]; ok && w == o {
			continue
		}
		out[mq] = o
	}
	return out
}

func (m *memOffsets) markWritten(mq MessageQueue, off int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.offsets[mq]; ok {
		m.written[mq] = off
	}
}

// remoteOffsets keeps clustering offsets on the brokers (QUERY_CONSUMER_OFFSET,
// UPDATE_CONSUMER_OFFSET).
type remoteOffsets struct {
	memOffsets
	in    *instance
	group string
}

func newRemoteOffsets(in *instance, group string) *remoteOffsets {
	return &remoteOffsets{memOffsets: memOffsets{offsets: map[MessageQueue]int64{}, written: map[MessageQueue]int64{}}, in: in, group: group}
}

func (r *remoteOffsets) read(ctx context.Context, mq MessageQueue) (int64, error) {
	addr := r.in.readAddr(mq.BrokerName)
	if addr == "" {
		return 0, fmt.Errorf("client: query offset of %s: %w: no broker for %q", mq, ErrNoRoute, mq.BrokerName)
	}
	req := r.in.newRequest(protocol.ReqQueryConsumerOffset)
	h := protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte(r.group), Topic: []byte(mq.Topic), QueueID: mq.QueueID, BrokerName: []byte(mq.BrokerName)}
	h.Encode(&req.Ext)
	resp, err := r.in.invoke(ctx, addr, req, r.in.cfg.requestTimeout)
	if err != nil {
		return 0, fmt.Errorf("client: query offset of %s: %w", mq, err)
	}
	switch resp.Code {
	case protocol.RespSuccess:
		var o protocol.OffsetResponse
		if err := o.Decode(&resp.Ext); err != nil {
			return 0, fmt.Errorf("client: query offset of %s: %w", mq, err)
		}
		return o.Offset, nil
	case protocol.RespQueryNotFound:
		return -1, nil
	}
	return 0, fmt.Errorf("client: query offset of %s: %w", mq, brokerError(addr, resp))
}

func (r *remoteOffsets) persist(ctx context.Context, mqs []MessageQueue, done func(MessageQueue, int64)) error {
	var errs []error
	for mq, off := range r.dirty(mqs) {
		if err := r.write(ctx, mq, off); err != nil {
			errs = append(errs, err)
			continue
		}
		r.markWritten(mq, off)
		if done != nil {
			done(mq, off)
		}
	}
	return errors.Join(errs...)
}

func (r *remoteOffsets) write(ctx context.Context, mq MessageQueue, off int64) error {
	addr := r.in.readAddr(mq.BrokerName) // a slave keeps it for its master's return
	if addr == "" {
		return fmt.Errorf("client: commit offset of %s: %w", mq, ErrNoRoute)
	}
	req := r.in.newRequest(protocol.ReqUpdateConsumerOffset)
	h := protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte(r.group), Topic: []byte(mq.Topic), QueueID: mq.QueueID, CommitOffset: off, BrokerName: []byte(mq.BrokerName)}
	h.Encode(&req.Ext)
	resp, err := r.in.invoke(ctx, addr, req, r.in.cfg.requestTimeout)
	if err != nil {
		return fmt.Errorf("client: commit offset of %s: %w", mq, err)
	}
	if resp.Code != protocol.RespSuccess {
		return fmt.Errorf("client: commit offset of %s: %w", mq, brokerError(addr, resp))
	}
	return nil
}

// localOffsets keeps broadcasting offsets in a JSON file per client and group:
// {"offsetTable":{"topic@broker@queueId":offset,...}}, written by temporary file,
// fsync, rename and directory fsync.
type localOffsets struct {
	memOffsets
	fs     vfs.FS
	path   string
	fileMu sync.Mutex
	loaded map[MessageQueue]int64
}

type localOffsetFile struct {
	OffsetTable map[string]int64 `json:"offsetTable"`
}

func newLocalOffsets(fsys vfs.FS, dir, clientID, group string) (*localOffsets, error) {
	l := &localOffsets{
		memOffsets: memOffsets{offsets: map[MessageQueue]int64{}, written: map[MessageQueue]int64{}},
		fs:         fsys,
		path:       filepath.Join(dir, sanitize(clientID), sanitize(group), "offsets.json"),
		loaded:     map[MessageQueue]int64{},
	}
	data, err := vfs.ReadFile(fsys, l.path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: offset file: %w", err)
	}
	var f localOffsetFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("client: offset file %s: %w", l.path, err)
	}
	for k, v := range f.OffsetTable {
		mq, ok := parseMQKey(k)
		if ok {
			l.loaded[mq] = v
		}
	}
	return l, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, s)
}

func parseMQKey(k string) (MessageQueue, bool) {
	i := strings.LastIndexByte(k, '@')
	if i < 0 {
		return MessageQueue{}, false
	}
	qid, err := strconv.Atoi(k[i+1:])
	if err != nil {
		return MessageQueue{}, false
	}
	rest := k[:i]
	j := strings.LastIndexByte(rest, '@')
	if j < 0 {
		return MessageQueue{}, false
	}
	return MessageQueue{Topic: rest[:j], BrokerName: rest[j+1:], QueueID: int32(qid)}, true
}

func (l *localOffsets) read(_ context.Context, mq MessageQueue) (int64, error) {
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	if o, ok := l.loaded[mq]; ok {
		return o, nil
	}
	return -1, nil
}

// persist writes the whole table (every queue with an offset) when any changed.
func (l *localOffsets) persist(_ context.Context, mqs []MessageQueue, done func(MessageQueue, int64)) error {
	d := l.dirty(mqs)
	if len(d) == 0 {
		return nil
	}
	l.fileMu.Lock()
	defer l.fileMu.Unlock()
	l.mu.Lock()
	for mq, o := range l.offsets {
		l.loaded[mq] = o
	}
	l.mu.Unlock()
	f := localOffsetFile{OffsetTable: map[string]int64{}}
	for mq, o := range l.loaded {
		f.OffsetTable[mq.String()] = o
	}
	data, err := json.Marshal(&f)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(l.fs, l.path, data); err != nil {
		return fmt.Errorf("client: offset file: %w", err)
	}
	for mq, o := range d {
		l.markWritten(mq, o)
		if done != nil {
			done(mq, o)
		}
	}
	return nil
}

// writeFileAtomic writes data to path through fsys: its directories are
// created durably (durable.MkdirAll: each new one's parent fsynced, or a
// power loss could take the directory and the file in it), then the file
// is replaced by a temporary file, fsync, rename and a directory fsync
// (durable.WriteFile), so a crash leaves the old file or the new one, and
// once it returned the new one. The file is created 0600, as os.CreateTemp
// made it before.
func writeFileAtomic(fsys vfs.FS, path string, data []byte) error {
	if err := durable.MkdirAll(fsys, filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return durable.WriteFile(fsys, path, data, durable.Perm(0o600))
}
