package litequeue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// Block layout (see the package doc).
const (
	BlockSize       = 512
	HeaderSize      = 32
	EntrySize       = 20
	EntriesPerBlock = (BlockSize - HeaderSize) / EntrySize // 24
	blockMagic      = 0x4C514231                           // "LQB1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one lite-queue entry: the consume queue's 20 bytes.
type Entry struct {
	CommitLogOffset int64
	Size            int32
	TagCode         int64
}

// header is a block's header, decoded.
type header struct {
	id, gen    uint32
	first      int64
	prev, next uint32
}

func putHeader(b []byte, h header) {
	be := binary.BigEndian
	be.PutUint32(b[0:], blockMagic)
	be.PutUint32(b[4:], h.id)
	be.PutUint32(b[8:], h.gen)
	be.PutUint64(b[16:], uint64(h.first))
	be.PutUint32(b[24:], h.prev)
	be.PutUint32(b[28:], h.next)
	be.PutUint32(b[12:], headerCRC(b))
}

func headerCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[0:12])
	return crc32.Update(c, castagnoli, b[16:28])
}

// parseHeader decodes b's header; ok is false when the magic or the CRC is
// wrong or the first offset is not a block boundary.
func parseHeader(b []byte) (h header, ok bool) {
	be := binary.BigEndian
	if be.Uint32(b[0:]) != blockMagic || be.Uint32(b[12:]) != headerCRC(b) {
		return h, false
	}
	h = header{id: be.Uint32(b[4:]), gen: be.Uint32(b[8:]), first: int64(be.Uint64(b[16:])),
		prev: be.Uint32(b[24:]), next: be.Uint32(b[28:])}
	return h, h.first >= 0 && h.first%EntriesPerBlock == 0
}

func setNext(b []byte, next uint32) { binary.BigEndian.PutUint32(b[28:], next) }

func putEntry(b []byte, e Entry) {
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(e.CommitLogOffset))
	be.PutUint32(b[8:], uint32(e.Size))
	be.PutUint64(b[12:], uint64(e.TagCode))
}

func getEntry(b []byte) Entry {
	be := binary.BigEndian
	return Entry{CommitLogOffset: int64(be.Uint64(b[0:])), Size: int32(be.Uint32(b[8:])), TagCode: int64(be.Uint64(b[12:]))}
}

// blockFile is one mapped block file.
type blockFile struct {
	base  int64 // byte position of the file's first block
	path  string
	m     *mmap.Mapping
	live  int  // blocks of live chains in it
	dirty bool // written since the last Flush
}

// fileName is a block file's name: its base, 20 digits.
func fileName(base int64) string { return fmt.Sprintf("%020d", base) }

// parseFileName returns the base a block file's name stands for.
func parseFileName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil && v >= 0
}

// mapFile opens and maps path read-write at size bytes, growing a shorter
// file (sparse) first. The descriptor is closed; the mapping outlives it.
func mapFile(fsys vfs.FS, path string, size int64, create bool) (*mmap.Mapping, error) {
	flag := os.O_RDWR
	if create {
		// Not O_EXCL: a file a failed newFile left behind (past the
		// allocation point, so holding no block) is taken over.
		flag |= os.O_CREATE
	}
	f, err := fsys.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("litequeue: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("litequeue: stat %s: %w", path, err)
	}
	if st.Size() != size {
		if st.Size() > size {
			return nil, fmt.Errorf("litequeue: %s is %d bytes, more than the file size %d: %w", path, st.Size(), size, ErrDamaged)
		}
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("litequeue: size %s: %w", path, err)
		}
		if create {
			if err := f.Datasync(); err != nil {
				return nil, fmt.Errorf("litequeue: sync %s: %w", path, err)
			}
		}
	}
	m, err := f.Map(0, int(size), mmap.ReadWrite)
	if err != nil {
		return nil, fmt.Errorf("litequeue: map %s: %w", path, err)
	}
	return m, nil
}

// block returns the bytes of block number n (which must lie in a mapped
// file), or nil.
func (x *Index) block(n uint32) []byte {
	pos := int64(n) * BlockSize
	i := x.fileIndex(pos)
	if i < 0 {
		return nil
	}
	f := x.files[i]
	off := pos - f.base
	return f.m.Bytes()[off : off+BlockSize]
}

// fileIndex returns the index in x.files of the file holding byte pos, or -1.
func (x *Index) fileIndex(pos int64) int {
	if len(x.files) == 0 {
		return -1
	}
	i := int((pos - x.files[0].base) / x.opts.FileSize)
	if pos < x.files[0].base || i >= len(x.files) || x.files[i] == nil {
		return -1
	}
	return i
}

// markDirty records that block n's file was written.
func (x *Index) markDirty(n uint32) {
	if i := x.fileIndex(int64(n) * BlockSize); i >= 0 {
		x.files[i].dirty = true
	}
}

// liveDelta adds d to the live count of block n's file.
func (x *Index) liveDelta(n uint32, d int) {
	if i := x.fileIndex(int64(n) * BlockSize); i >= 0 {
		x.files[i].live += d
	}
}

// allocChunk is how far ahead of the allocation point disk blocks are
// reserved, so that a full disk fails an Append instead of faulting a
// store through the mapping.
const allocChunk = 1 << 20

// alloc allocates the next block, writing its header h (id, gen, first,
// prev) with pwrite when its page was never written (a store into an
// uncached page of a mapped file costs a fault and, on ext4, a journal
// transaction), through the mapping otherwise. Under mu.
func (x *Index) alloc(h header) (uint32, error) {
	pos := int64(x.next) * BlockSize
	if len(x.files) == 0 || pos >= x.files[len(x.files)-1].base+x.opts.FileSize {
		if err := x.newFile(pos); err != nil {
			return 0, err
		}
	}
	f := x.files[len(x.files)-1]
	if pos+BlockSize > x.reserved {
		to := min((pos+BlockSize+allocChunk-1)/allocChunk*allocChunk, f.base+x.opts.FileSize)
		if err := x.wf.Allocate(x.reserved-f.base, to-x.reserved); err != nil {
			return 0, fmt.Errorf("litequeue: reserve blocks of %s: %w", f.path, err)
		}
		x.reserved = to
	}
	var buf [BlockSize]byte
	putHeader(buf[:], h)
	if pos >= x.touched {
		// The block starts a page nothing was written to: write the page's
		// rest (the block, then zeros) with pwrite.
		page := int64(mmap.PageSize())
		end := min((pos/page+1)*page, f.base+x.opts.FileSize)
		pbuf := x.pageBuf[:end-pos]
		clear(pbuf)
		copy(pbuf, buf[:])
		if _, err := x.wf.WriteAt(pbuf, pos-f.base); err != nil {
			return 0, fmt.Errorf("litequeue: write %s: %w", f.path, err)
		}
		x.touched = end
	} else {
		copy(f.m.Bytes()[pos-f.base:], buf[:])
	}
	n := x.next
	x.next++
	f.live++
	f.dirty = true
	return n, nil
}

// newFile creates, sizes and maps the block file starting at base, and makes
// it the one the allocator writes (its descriptor stays open for pwrite).
func (x *Index) newFile(base int64) error {
	if base/BlockSize+x.opts.FileSize/BlockSize > int64(noBlock) {
		return fmt.Errorf("litequeue: %w: block numbers exhausted", ErrFull)
	}
	path := filepath.Join(x.dir, fileName(base))
	m, err := mapFile(x.fs, path, x.opts.FileSize, true)
	if err != nil {
		_ = x.fs.Remove(path) // nothing in it yet; a retry creates it again
		return err
	}
	if err := x.openWriteFile(path); err != nil {
		m.Release()
		_ = x.fs.Remove(path)
		return err
	}
	x.files = append(x.files, &blockFile{base: base, path: path, m: m, dirty: true})
	x.dirDirty = true
	x.reserved = base
	x.touched = base
	return nil
}

// openWriteFile opens path for the allocator's pwrites, closing the previous one.
func (x *Index) openWriteFile(path string) error {
	f, err := x.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("litequeue: open %s: %w", path, err)
	}
	if x.wf != nil {
		x.wf.Close()
	}
	x.wf = f
	return nil
}

// removeDeadFiles unmaps and removes the files no live block is in, except
// the newest (the allocator's). Under mu.
func (x *Index) removeDeadFiles() error {
	var errs []error
	removed := false
	for i := 0; i < len(x.files)-1; i++ {
		f := x.files[i]
		if f == nil || f.live > 0 {
			continue
		}
		f.m.Release()
		x.files[i] = nil
		if err := x.fs.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("litequeue: remove %s: %w", f.path, err))
		}
		removed = true
	}
	// Drop the leading nils so files[0] is the oldest present file.
	k := 0
	for k < len(x.files)-1 && x.files[k] == nil {
		k++
	}
	x.files = x.files[k:]
	if removed {
		x.dirDirty = true
	}
	return errors.Join(errs...)
}
