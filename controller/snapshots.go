package controller

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// The layout of hashicorp/raft's FileSnapshotStore, kept so that a data
// directory written by either store opens with the other:
// DataDir/snapshots/TERM-INDEX-MSEC/{meta.json,state.bin}, a snapshot being
// written under the same name plus ".tmp".
const (
	snapDirName   = "snapshots"
	snapMetaFile  = "meta.json"
	snapStateFile = "state.bin"
	snapTmpSuffix = ".tmp"
	// snapRetain is how many snapshots are kept (as with FileSnapshotStore(dir, 2)).
	snapRetain = 2
)

// ErrSnapshotCRC: a snapshot's state.bin does not match the CRC its
// meta.json recorded (Open refuses it; Raft then tries an older one).
var ErrSnapshotCRC = errors.New("controller: snapshot state does not match its CRC")

// snapshotStore is raft.SnapshotStore through a vfs.FS, so that the fault
// injection (internal/vfs/errorfs) and power-loss (internal/vfs/crashfs)
// tests reach it. It differs from FileSnapshotStore in what a power loss
// can take: a snapshot whose sink's Close returned nil is durable (Raft
// compacts its log behind the snapshot at that moment). FileSnapshotStore
// fsyncs state.bin and meta.json and the snapshots directory after the
// rename, but never the new snapshot's own directory, so a power loss
// could leave the snapshot's directory without its files while the log
// entries it replaced were gone; nor the snapshots directory's creation.
//
// Writing a snapshot: its directory NAME.tmp is created, state.bin and
// meta.json written in it and fsynced,
// the directory fsynced, renamed to NAME and the snapshots directory
// fsynced. A crash before the rename leaves NAME.tmp, which the next
// newSnapshotStore removes; List never returns it.
type snapshotStore struct {
	fs  vfs.FS
	dir string // DataDir/snapshots
	log *slog.Logger
}

// snapshotMeta is meta.json (FileSnapshotStore's fileSnapshotMeta).
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// newSnapshotStore opens (creating it durably) dataDir/snapshots and
// removes the directories of snapshots that were being written when the
// process stopped.
func newSnapshotStore(fsys vfs.FS, dataDir string, log *slog.Logger) (*snapshotStore, error) {
	s := &snapshotStore{fs: fsys, dir: filepath.Join(dataDir, snapDirName), log: log}
	if err := durable.MkdirAll(fsys, s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("controller: snapshots: %w", err)
	}
	ents, err := fsys.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("controller: snapshots: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasSuffix(e.Name(), snapTmpSuffix) {
			if err := fsys.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				return nil, fmt.Errorf("controller: snapshots: remove an unfinished snapshot: %w", err)
			}
			log.Info("controller: removed an unfinished snapshot", "dir", filepath.Join(s.dir, e.Name()))
		}
	}
	return s, nil
}

// Create starts a snapshot (raft.SnapshotStore).
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration,
	confIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("controller: unsupported snapshot version %d", version)
	}
	name := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	tmp := filepath.Join(s.dir, name+snapTmpSuffix)
	if err := s.fs.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("controller: snapshot: %w", err)
	}
	k := &snapshotSink{s: s, tmp: tmp, final: filepath.Join(s.dir, name),
		meta: snapshotMeta{SnapshotMeta: raft.SnapshotMeta{Version: version, ID: name, Index: index, Term: term,
			Configuration: conf, ConfigurationIndex: confIndex}},
		hash: crc64.New(crc64.MakeTable(crc64.ECMA))}
	f, err := s.fs.OpenFile(filepath.Join(tmp, snapStateFile), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		_ = s.fs.RemoveAll(tmp)
		return nil, fmt.Errorf("controller: snapshot: %w", err)
	}
	k.f = f
	k.buf = bufio.NewWriterSize(io.MultiWriter(&offsetWriter{f: f, off: &k.size}, k.hash), 64<<10)
	return k, nil
}

// List returns the snapshots that have a readable meta.json, newest first,
// at most snapRetain (raft.SnapshotStore).
func (s *snapshotStore) List() ([]*raft.SnapshotMeta, error) {
	metas, err := s.all()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, 0, min(len(metas), snapRetain))
	for _, m := range metas[:min(len(metas), snapRetain)] {
		out = append(out, &m.SnapshotMeta)
	}
	return out, nil
}

// all returns every finished snapshot's metadata, newest first (by term,
// index, then name, as FileSnapshotStore orders them).
func (s *snapshotStore) all() ([]*snapshotMeta, error) {
	ents, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("controller: snapshots: %w", err)
	}
	var metas []*snapshotMeta
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapTmpSuffix) {
			continue
		}
		m, err := s.readMeta(e.Name())
		if err != nil {
			s.log.Warn("controller: snapshot skipped: its metadata does not read", "dir", filepath.Join(s.dir, e.Name()), "err", err)
			continue
		}
		if m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
			s.log.Warn("controller: snapshot skipped: unsupported version", "dir", filepath.Join(s.dir, e.Name()), "version", m.Version)
			continue
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b *snapshotMeta) int {
		switch {
		case a.Term != b.Term:
			return cmpDesc(a.Term, b.Term)
		case a.Index != b.Index:
			return cmpDesc(a.Index, b.Index)
		}
		return strings.Compare(b.ID, a.ID)
	})
	return metas, nil
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

func (s *snapshotStore) readMeta(name string) (*snapshotMeta, error) {
	b, err := vfs.ReadFile(s.fs, filepath.Join(s.dir, name, snapMetaFile))
	if err != nil {
		return nil, err
	}
	m := &snapshotMeta{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Open returns snapshot id's metadata and state, once the state matched
// its CRC (raft.SnapshotStore).
func (s *snapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	m, err := s.readMeta(id)
	if err != nil {
		return nil, nil, fmt.Errorf("controller: snapshot %s: %w", id, err)
	}
	f, err := s.fs.OpenFile(filepath.Join(s.dir, id, snapStateFile), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("controller: snapshot %s: %w", id, err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err == nil && (n != m.Size || !bytes.Equal(h.Sum(nil), m.CRC)) {
		err = fmt.Errorf("%w (%s: %d bytes, meta.json says %d)", ErrSnapshotCRC, id, n, m.Size)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("controller: snapshot %s: %w", id, err)
	}
	return &m.SnapshotMeta, &snapshotReader{Reader: bufio.NewReader(io.NewSectionReader(f, 0, n)), f: f}, nil
}

// reap removes the snapshots beyond the newest snapRetain. A removal that
// a crash undoes leaves an older snapshot, which List does not return.
func (s *snapshotStore) reap() error {
	metas, err := s.all()
	if err != nil {
		return err
	}
	for _, m := range metas[min(len(metas), snapRetain):] {
		if err := s.fs.RemoveAll(filepath.Join(s.dir, m.ID)); err != nil {
			return fmt.Errorf("controller: snapshots: %w", err)
		}
	}
	return nil
}

type snapshotReader struct {
	io.Reader
	f vfs.File
}

func (r *snapshotReader) Close() error { return r.f.Close() }

// offsetWriter writes sequentially through WriteAt.
type offsetWriter struct {
	f   vfs.File
	off *int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, *w.off)
	*w.off += int64(n)
	return n, err
}

// snapshotSink is one snapshot being written (raft.SnapshotSink).
type snapshotSink struct {
	s          *snapshotStore
	tmp, final string
	meta       snapshotMeta
	f          vfs.File
	size       int64
	hash       hash.Hash64
	buf        *bufio.Writer
	closed     bool
}

func (k *snapshotSink) ID() string { return k.meta.ID }

func (k *snapshotSink) Write(p []byte) (int, error) { return k.buf.Write(p) }

// Close finishes the snapshot: when it returns nil, the snapshot survives a
// power loss. On an error the unfinished snapshot is removed (or, if that
// fails too, left under its temporary name for the next start to remove).
func (k *snapshotSink) Close() error {
	if k.closed {
		return nil
	}
	k.closed = true
	if err := k.finish(); err != nil {
		if rerr := k.s.fs.RemoveAll(k.tmp); rerr != nil {
			k.s.log.Warn("controller: an unfinished snapshot could not be removed", "dir", k.tmp, "err", rerr)
		}
		return fmt.Errorf("controller: snapshot %s: %w", k.meta.ID, err)
	}
	// Older snapshots are not needed for the new one to be durable: a
	// failure to remove them is reported, the snapshot stands.
	if err := k.s.reap(); err != nil {
		k.s.log.Warn("controller: old snapshots not removed", "err", err)
	}
	return nil
}

func (k *snapshotSink) finish() error {
	err := k.buf.Flush()
	if err == nil {
		err = k.f.Sync()
	}
	if cerr := k.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	k.meta.Size, k.meta.CRC = k.size, k.hash.Sum(nil)
	b, err := json.Marshal(&k.meta)
	if err != nil {
		return err
	}
	if err := writeSynced(k.s.fs, filepath.Join(k.tmp, snapMetaFile), b); err != nil {
		return err
	}
	// The new directory's entries, then the directory under its final name.
	if err := k.s.fs.SyncDir(k.tmp); err != nil {
		return err
	}
	if err := k.s.fs.Rename(k.tmp, k.final); err != nil {
		return err
	}
	return k.s.fs.SyncDir(k.s.dir)
}

// Cancel abandons the snapshot and removes what was written.
func (k *snapshotSink) Cancel() error {
	if k.closed {
		return nil
	}
	k.closed = true
	k.f.Close()
	if err := k.s.fs.RemoveAll(k.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("controller: snapshot %s: %w", k.meta.ID, err)
	}
	return nil
}

// writeSynced creates path with data and fsyncs it.
func writeSynced(fsys vfs.FS, path string, data []byte) error {
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.WriteAt(data, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
