package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/message"
)

// store dump: the records of a commit-log segment, or of a consume queue
// (its entries and the records they point to), read from the files of a
// stopped broker's data directory without changing them. Each record is
// checked (magic, size, body CRC); a bad one is printed with its error and
// the segment's walk stops there, as recovery would.

// dumpRecord is one record as dump prints it.
type dumpRecord struct {
	CommitLogOffset int64             `json:"commitLogOffset"`
	Size            int32             `json:"size"`
	Topic           string            `json:"topic,omitempty"`
	QueueID         int32             `json:"queueId"`
	QueueOffset     int64             `json:"queueOffset"`
	StoreTimestamp  int64             `json:"storeTimestamp,omitempty"`
	BornTimestamp   int64             `json:"bornTimestamp,omitempty"`
	BornHost        string            `json:"bornHost,omitempty"`
	StoreHost       string            `json:"storeHost,omitempty"`
	SysFlag         int32             `json:"sysFlag"`
	ReconsumeTimes  int32             `json:"reconsumeTimes"`
	Properties      map[string]string `json:"properties,omitempty"`
	BodySize        int               `json:"bodySize"`
	Body            string            `json:"body,omitempty"`
	TagCode         *int64            `json:"tagCode,omitempty"` // from the consume-queue entry
	Error           string            `json:"error,omitempty"`
}

// dumpUsage says what is wrong with store dump's command line ("" nothing).
func dumpUsage(nargs int, segment, topic bool) string {
	switch {
	case nargs == 0:
		return "no data directory given (the broker's --data-dir)"
	case nargs > 1:
		return "one data directory only"
	case segment && topic:
		return "--segment and --topic exclude each other"
	case !segment && !topic:
		return "give --segment NAME (a commit-log segment) or --topic T --queue N (a consume queue)"
	}
	return ""
}

func storeDump(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("apogee-admin store dump", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	segment := fs.String("segment", "", "a commit-log segment: its file name (20 digits) or path")
	topic := fs.String("topic", "", "a consume queue's topic (with --queue)")
	queue := fs.Int32("queue", 0, "the consume queue's id")
	from := fs.Int64("from", 0, "first commit-log offset (segment) or queue offset (queue)")
	count := fs.Int("count", 100, "records to print at most (0: all)")
	body := fs.Int("body", 64, "body bytes to print per record (0: none, -1: all)")
	asJSON := fs.Bool("json", false, "one JSON object per record, one per line")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: apogee-admin store dump (--segment NAME | --topic T --queue N) [flags] DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(fs, "store dump", err, stderr)
	}
	if why := dumpUsage(fs.NArg(), *segment != "", *topic != ""); why != "" {
		fmt.Fprintln(stderr, "apogee-admin store dump:", why)
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	unlock, err := lockData(dir)
	if err != nil {
		fmt.Fprintf(stderr, "apogee-admin: %s is in use by a running broker: stop it first (%v)\n", dir, err)
		return 2
	}
	defer unlock()
	d := dumper{dir: dir, out: stdout, json: *asJSON, body: *body, count: *count}
	if *segment != "" {
		err = d.segment(*segment, *from)
	} else {
		err = d.queue(*topic, *queue, *from)
	}
	if err != nil {
		fmt.Fprintln(stderr, "apogee-admin:", err)
		return 2
	}
	if !d.json {
		fmt.Fprintf(stdout, "%d records, %d bad\n", d.printed, d.bad)
	}
	if d.bad > 0 {
		return 1
	}
	return 0
}

type dumper struct {
	dir     string
	out     io.Writer
	json    bool
	body    int
	count   int
	printed int
	bad     int
}

func (d *dumper) full() bool { return d.count > 0 && d.printed >= d.count }

func (d *dumper) emit(r dumpRecord) {
	d.printed++
	if r.Error != "" {
		d.bad++
	}
	if d.json {
		b, _ := json.Marshal(r)
		fmt.Fprintln(d.out, string(b))
		return
	}
	if r.Error != "" {
		fmt.Fprintf(d.out, "offset %d size %d: BAD: %s\n", r.CommitLogOffset, r.Size, r.Error)
		return
	}
	tag := ""
	if r.TagCode != nil {
		tag = " tagCode=" + strconv.FormatInt(*r.TagCode, 10)
	}
	fmt.Fprintf(d.out, "offset %d size %d topic %s queue %d queueOffset %d stored %s born %s from %s sysFlag %d reconsume %d%s\n",
		r.CommitLogOffset, r.Size, r.Topic, r.QueueID, r.QueueOffset, fmtTime(r.StoreTimestamp), fmtTime(r.BornTimestamp),
		r.BornHost, r.SysFlag, r.ReconsumeTimes, tag)
	if len(r.Properties) > 0 {
		keys := make([]string, 0, len(r.Properties))
		for k := range r.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%s", k, r.Properties[k])
		}
		fmt.Fprintf(d.out, "  properties:%s\n", b.String())
	}
	if d.body != 0 {
		fmt.Fprintf(d.out, "  body (%d bytes): %q\n", r.BodySize, r.Body)
	}
}

// record decodes one record at off.
func (d *dumper) record(off int64, rec []byte) dumpRecord {
	r := dumpRecord{CommitLogOffset: off, Size: int32(len(rec))}
	v, err := message.Decode(rec, true)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Topic, r.QueueID, r.QueueOffset = string(v.Topic()), v.QueueID(), v.QueueOffset()
	r.StoreTimestamp, r.BornTimestamp = v.StoreTimestamp(), v.BornTimestamp()
	r.BornHost, r.StoreHost = v.BornHost().String(), v.StoreHost().String()
	r.SysFlag, r.ReconsumeTimes = v.SysFlag(), v.ReconsumeTimes()
	if props := v.Properties(); len(props) > 0 {
		r.Properties = map[string]string{}
		for _, kv := range strings.Split(string(props), string(rune(message.PropertySeparator))) {
			if k, val, ok := strings.Cut(kv, string(rune(message.NameValueSeparator))); ok {
				r.Properties[k] = val
			}
		}
	}
	b := v.Body()
	r.BodySize = len(b)
	if d.body >= 0 && len(b) > d.body {
		b = b[:d.body]
	}
	r.Body = string(b)
	return r
}

// segments lists the commit-log segment files by start offset.
func (d *dumper) segments() ([]int64, error) {
	names, err := filepath.Glob(filepath.Join(d.dir, "commitlog", "[0-9]*"))
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, n := range names {
		if v, err := strconv.ParseInt(filepath.Base(n), 10, 64); err == nil && len(filepath.Base(n)) == 20 {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func segPath(dir string, base int64) string {
	return filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", base))
}

// segment walks the records of one segment from from (a global offset; 0:
// the segment's start).
func (d *dumper) segment(name string, from int64) error {
	base, err := strconv.ParseInt(filepath.Base(name), 10, 64)
	if err != nil {
		return fmt.Errorf("segment %q: its name is its start offset (20 digits)", name)
	}
	f, err := os.Open(segPath(d.dir, base))
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pos := max(from-base, 0)
	var hdr [8]byte
	for pos+8 <= st.Size() && !d.full() {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return err
		}
		size := int64(int32(binary.BigEndian.Uint32(hdr[:])))
		if size == 0 {
			break // the unwritten rest of the segment
		}
		if _, blank := message.IsBlank(hdr[:]); blank {
			break
		}
		if size < 8 || pos+size > st.Size() || size > 64<<20 {
			d.emit(dumpRecord{CommitLogOffset: base + pos, Size: int32(size), Error: fmt.Sprintf("bad record size %d", size)})
			break
		}
		rec := make([]byte, size)
		if _, err := f.ReadAt(rec, pos); err != nil {
			return err
		}
		r := d.record(base+pos, rec)
		d.emit(r)
		if r.Error != "" {
			break
		}
		pos += size
	}
	return nil
}

// queue walks a consume queue's entries from queue offset from and prints
// the record each points to.
func (d *dumper) queue(topic string, q int32, from int64) error {
	qdir := filepath.Join(d.dir, "consumequeue", topic, strconv.Itoa(int(q)))
	names, err := filepath.Glob(filepath.Join(qdir, "[0-9]*"))
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("no consume queue %s/%d in %s", topic, q, d.dir)
	}
	sort.Strings(names)
	segs, err := d.segments()
	if err != nil {
		return err
	}
	files := map[int64]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	read := func(off int64, size int32) ([]byte, error) {
		i := sort.Search(len(segs), func(i int) bool { return segs[i] > off }) - 1
		if i < 0 {
			return nil, fmt.Errorf("no segment holds offset %d (the log starts at %v)", off, segs)
		}
		f := files[segs[i]]
		if f == nil {
			if f, err = os.Open(segPath(d.dir, segs[i])); err != nil {
				return nil, err
			}
			files[segs[i]] = f
		}
		buf := make([]byte, size)
		_, err := f.ReadAt(buf, off-segs[i])
		return buf, err
	}
	for _, name := range names {
		base, err := strconv.ParseInt(filepath.Base(name), 10, 64)
		if err != nil {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		first := base / consumequeue.EntrySize
		for i := 0; i+consumequeue.EntrySize <= len(data) && !d.full(); i += consumequeue.EntrySize {
			qoff := first + int64(i/consumequeue.EntrySize)
			if qoff < from {
				continue
			}
			e := data[i : i+consumequeue.EntrySize]
			off := int64(binary.BigEndian.Uint64(e))
			size := int32(binary.BigEndian.Uint32(e[8:]))
			tag := int64(binary.BigEndian.Uint64(e[12:]))
			if off == 0 && size == 0 && tag == 0 && qoff > 0 {
				break // the unwritten rest of the file
			}
			if size <= 0 || size == 0x7FFFFFFF {
				continue // a pre-fill or lost-message entry
			}
			rec, err := read(off, size)
			r := dumpRecord{CommitLogOffset: off, Size: size, QueueOffset: qoff}
			if err != nil {
				r.Error = err.Error()
			} else {
				r = d.record(off, rec)
				if r.Error == "" && (r.Topic != topic || r.QueueID != q || r.QueueOffset != qoff) {
					r.Error = fmt.Sprintf("entry %d points to a record of %s/%d offset %d", qoff, r.Topic, r.QueueID, r.QueueOffset)
				}
			}
			r.TagCode = &tag
			d.emit(r)
		}
	}
	return nil
}
