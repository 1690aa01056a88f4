package store

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/commitlog"
)

// Truncation reports what TruncateReplica cut.
type Truncation struct {
	// From is the log's end before, To after.
	From, To int64
	// Bytes is From - To; Messages the records among them.
	Bytes, Messages int64
	// Aside is the file holding the bytes cut, [To, From), under
	// commitlog/truncated/ ("" when nothing was cut, or the options keep
	// nothing of that size: Options.TruncatedMaxBytes); KeptBytes is its
	// size. The cleanup task removes it after Options.TruncatedRetention,
	// or sooner to keep the total under TruncatedMaxBytes.
	Aside     string
	KeptBytes int64
}

// TruncateReplica cuts a replica's store back to off: the commit log ends
// there, and every consume-queue entry and index entry of a record at or
// beyond it goes (the index loses whole files, whose keys below off are
// indexed again before it returns). It is what a replica does when its log
// went further than its new master's in an epoch the master does not
// share: off is the last common offset of their epoch files
// (LastCommonOffset), which must be a record boundary between the log's
// minimum and its end. The bytes cut are kept in a file of their own (see
// commitlog.Log.TruncateTo). The loss is logged (WARN, naming the file
// and the size kept) and returned.
//
// It runs with the dispatcher stopped (under its lock, as ResetReplica):
// the caller must not append (AppendReplicated) meanwhile. Readers are
// safe: views taken before keep their bytes (see commitlog.Log.TruncateTo),
// and reads after see the store end at off. A failure while the commit
// log's files were being moved makes the log fail (ErrLogFailed): restart
// the store, whose recovery then cuts the queues and the index to what the
// log holds.
func (s *Store) TruncateReplica(off int64) (Truncation, error) {
	if !s.replica.Load() {
		return Truncation{}, ErrNotReplica
	}
	if s.closed.Load() {
		return Truncation{}, ErrClosed
	}
	d := &s.dispatch
	d.mu.Lock()
	end := s.log.WrittenOffset()
	tr := Truncation{From: end, To: off}
	if off == end {
		d.mu.Unlock()
		return tr, nil
	}
	if off < s.log.MinOffset() || off > end {
		d.mu.Unlock()
		return tr, fmt.Errorf("store: truncate to %d: outside the log [%d, %d]", off, s.log.MinOffset(), end)
	}
	if !isBoundary(s.log, off) {
		d.mu.Unlock()
		return tr, fmt.Errorf("store: truncate to %d: not a record boundary", off)
	}
	// Count what goes before it goes.
	c := s.log.NewCursor(off)
	for {
		_, _, err := c.Next()
		if err != nil {
			if !errors.Is(err, commitlog.ErrOffsetNotWritten) {
				c.Close()
				d.mu.Unlock()
				return tr, fmt.Errorf("store: truncate to %d: reading the records cut: %w", off, err)
			}
			break
		}
		tr.Messages++
	}
	c.Close()
	tr.Bytes = end - off

	// From here on the checkpoint says dispatch resumes at off at the
	// latest, whatever happens next: a failure (or a crash) part way
	// leaves queues or index files cut while the log still holds their
	// records, and dispatching again from there restores them.
	from, err := s.truncateLocked(off, &tr)
	d.cursor.Close()
	d.cursor = s.log.NewCursor(from)
	s.dispatched.Store(from)
	d.mu.Unlock()
	// Dispatch again from there (the records the index lost below off, and
	// after a failure everything the queues lost; entries that are there
	// already are no-ops), then record the state.
	d.run()
	if ferr := s.flushDerived(); err == nil {
		err = ferr
	}
	if err != nil {
		return tr, err
	}
	if tr.Aside != "" {
		s.opts.Logger.Warn("store: replica truncated: its log had records its master does not have; the bytes cut are kept in a file removed after the truncation retention (truncatedFileReservedTime, truncatedMaxBytes)",
			"from", tr.From, "to", tr.To, "bytes", tr.Bytes, "messages", tr.Messages, "keptIn", tr.Aside, "keptBytes", tr.KeptBytes)
	} else {
		s.opts.Logger.Warn("store: replica truncated: its log had records its master does not have; the bytes cut are not kept (larger than truncatedMaxBytes, or that is 0: keep nothing)",
			"from", tr.From, "to", tr.To, "bytes", tr.Bytes, "messages", tr.Messages, "keptBytes", 0, "truncatedMaxBytes", s.opts.TruncatedMaxBytes)
	}
	return tr, nil
}

// truncateLocked cuts the queues, the index and the log (in that order: no
// reader finds an entry for a record that is going) and returns where
// dispatch must resume. Called with the dispatcher's lock held.
func (s *Store) truncateLocked(off int64, tr *Truncation) (from int64, err error) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	end := s.dispatched.Load()
	if err := s.ckpt.write(off); err != nil {
		return end, err
	}
	if err := s.cqs.TruncateAfter(off); err != nil {
		return off, fmt.Errorf("store: truncate: %w", err)
	}
	if err := s.lq.TruncateFrom(off); err != nil {
		return off, fmt.Errorf("store: truncate: %w", err)
	}
	idxResume, err := s.idx.TruncateAfter(off)
	if err != nil {
		// Which files went is not known: index everything again.
		min := s.log.MinOffset()
		if werr := s.ckpt.write(min); werr != nil {
			err = errors.Join(err, werr)
		}
		return min, fmt.Errorf("store: truncate: %w", err)
	}
	from = max(min(off, idxResume), s.log.MinOffset())
	if from < off && !isBoundary(s.log, from) {
		from = s.log.MinOffset()
	}
	if from < off {
		if err := s.ckpt.write(from); err != nil {
			return from, err
		}
	}
	lt, err := s.log.TruncateTo(off)
	tr.Aside, tr.KeptBytes = lt.Kept, lt.KeptBytes
	if err != nil {
		return from, fmt.Errorf("store: truncate: %w", err)
	}
	return from, nil
}
