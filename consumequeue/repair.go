package consumequeue

// LostSize is the Size of an entry that stands for a message the commitlog
// lost: its bytes were found damaged and set aside, so no record is left for
// its queue offset. A rebuild from the commitlog writes one for each such
// offset (FillLost) so that queue offsets stay dense and are never handed out
// twice. Real records are at least 91 bytes, so no reader can mistake it for
// one; readers skip it.
const LostSize = 1

// IsLost reports whether e stands for a lost message (see LostSize).
func (e Entry) IsLost() bool { return e.Size == LostSize }

// FillLost writes a lost-message entry (LostSize) at every offset from
// MaxOffset up to off, each pointing one byte further from the previous
// entry's end: into the commitlog range the lost records occupied, which
// holds at least one byte per record. The writer calls it when a rebuild
// meets a record whose queue offset is beyond MaxOffset of a queue that
// already has entries (Append's ErrGap): the records in between are gone.
func (q *Queue) FillLost(off int64) error {
	for k := q.max.Load(); k < off; k++ {
		if err := q.Append(k, Entry{CommitLogOffset: q.lastEnd.Load(), Size: LostSize}); err != nil {
			return err
		}
	}
	return nil
}

// SearchCommitLogOffset returns the first queue offset in [MinOffset,
// MaxOffset) whose entry's commitlog offset is at least off (MaxOffset if
// none). Entries follow commitlog order; blank pre-fill entries count as
// below every offset. All-zero entries (a power loss took them; the
// store's re-dispatch fills them in) carry no offset: the search decides
// on the next entry that is not one, and a run of them up to MaxOffset
// counts as above.
func (q *Queue) SearchCommitLogOffset(off int64) (int64, error) {
	lo, hi := q.MinOffset(), q.MaxOffset()
	for lo < hi {
		mid := lo + (hi-lo)/2
		k := mid
		var e Entry
		for ; k < hi; k++ {
			var err error
			if e, err = q.Get(k); err != nil {
				return 0, q.errorf("search commitlog offset %d: offset %d: %w", off, k, err)
			}
			if classify(e) != kindZero {
				break
			}
		}
		if k == hi || classify(e) == kindMessage && e.CommitLogOffset >= off {
			hi = mid
		} else {
			lo = k + 1
		}
	}
	return lo, nil
}

// Repair overwrites the entry at off, below MaxOffset, with e when they
// differ, and reports whether it wrote. The scrubber calls it with the entry
// the commitlog's record at that queue offset implies: the log is the truth.
// It serialises with Append (the writer's lock) and with readers (the
// sequence lock), and writes with pwrite, so a full disk fails here instead
// of faulting a store into the mapping.
func (q *Queue) Repair(off int64, e Entry) (bool, error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.closed.Load() {
		return false, ErrClosed
	}
	if q.set.opts.ReadOnly {
		return false, ErrReadOnly
	}
	if !validForAppend(e) {
		return false, q.errorf("repair at %d: %+v: %w", off, e, ErrInvalidEntry)
	}
	if off < q.min.Load() || off >= q.max.Load() {
		return false, ErrOutOfRange
	}
	old, err := q.entryAt(off)
	if err != nil {
		return false, err
	}
	if old == e {
		return false, nil
	}
	if err := q.rewrite(off, e); err != nil {
		return false, err
	}
	if off == q.max.Load()-1 {
		q.lastEnd.Store(e.End())
	}
	if off == q.recTailAt {
		q.recTail = e
	}
	return true, nil
}
