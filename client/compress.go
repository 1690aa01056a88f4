package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/apogeemq/apogee/message"
)

// maxInflated bounds what a compressed body may inflate to on the consumer side, so a
// corrupt or hostile body cannot allocate without limit.
const maxInflated = 64 << 20

// compressor compresses producer bodies with one codec. Safe for concurrent use.
type compressor struct {
	kind  Compression
	level int
	zlibs sync.Pool // *zlibWriter
	zstd  *zstd.Encoder
}

type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

type zlibWriter struct {
	out sliceWriter
	zw  *zlib.Writer
}

func newCompressor(kind Compression, level int) (*compressor, error) {
	c := &compressor{kind: kind, level: level}
	if kind == CompressionZstd {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)), zstd.WithEncoderConcurrency(2))
		if err != nil {
			return nil, fmt.Errorf("client: zstd encoder: %w", err)
		}
		c.zstd = enc
	}
	return c, nil
}

// compress appends src compressed to dst[:0] and returns it with the sysflag bits
// announcing the codec.
func (c *compressor) compress(dst, src []byte) ([]byte, int32, error) {
	if c.kind == CompressionZstd {
		return c.zstd.EncodeAll(src, dst[:0]), message.FlagCompressed | message.CompressionZSTD, nil
	}
	w, _ := c.zlibs.Get().(*zlibWriter)
	if w == nil {
		w = &zlibWriter{}
		zw, err := zlib.NewWriterLevel(&w.out, c.level)
		if err != nil {
			return dst, 0, fmt.Errorf("client: zlib writer: %w", err)
		}
		w.zw = zw
	}
	w.out.b = dst[:0]
	w.zw.Reset(&w.out)
	_, err := w.zw.Write(src)
	if err == nil {
		err = w.zw.Close()
	}
	out := w.out.b
	w.out.b = nil
	c.zlibs.Put(w)
	if err != nil {
		return dst, 0, fmt.Errorf("client: zlib: %w", err)
	}
	return out, message.FlagCompressed, nil
}

func (c *compressor) close() {
	if c.zstd != nil {
		c.zstd.Close()
	}
}

var (
	zlibReaders sync.Pool // io.ReadCloser implementing zlib.Resetter
	lz4Readers  sync.Pool // *lz4.Reader
	zstdOnce    sync.Once
	zstdDec     *zstd.Decoder
	zstdErr     error
)

// errUnsupportedCodec: the body's compression type is none of the three RocketMQ 5
// defines (sysflag bits 8-10: 1 LZ4, 2 ZSTD, 3 ZLIB; 0 is zlib too).
var errUnsupportedCodec = errors.New("client: unsupported compression type")

// errInflatedTooLarge: a compressed body inflates to more than maxInflated bytes.
var errInflatedTooLarge = fmt.Errorf("client: inflated body over %d bytes", maxInflated)

// decompress inflates a stored body according to its sysflag, as RocketMQ 5's
// CompressionType reads the bits: type 0 or ZLIB is zlib, ZSTD is zstd, LZ4 is an
// LZ4 frame (what the Java client's Lz4Compressor, lz4-java's LZ4FrameOutputStream,
// writes). The result is a new slice.
func decompress(body []byte, sysFlag int32) ([]byte, error) {
	switch sysFlag & message.CompressionMask {
	case 0, message.CompressionZLIB:
		return inflateZlib(body)
	case message.CompressionLZ4:
		return inflateLZ4(body)
	case message.CompressionZSTD:
		zstdOnce.Do(func() {
			zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxInflated))
		})
		if zstdErr != nil {
			return nil, zstdErr
		}
		return zstdDec.DecodeAll(body, nil)
	}
	return nil, errUnsupportedCodec
}

func inflateZlib(body []byte) ([]byte, error) {
	br := bytes.NewReader(body)
	var zr io.ReadCloser
	if r, ok := zlibReaders.Get().(io.ReadCloser); ok {
		if err := r.(zlib.Resetter).Reset(br, nil); err != nil {
			return nil, err
		}
		zr = r
	} else {
		r, err := zlib.NewReader(br)
		if err != nil {
			return nil, err
		}
		zr = r
	}
	out, err := readInflated(zr, len(body))
	if err != nil {
		return nil, err
	}
	zlibReaders.Put(zr)
	return out, nil
}

// inflateLZ4 reads one LZ4 frame (or several concatenated, as the frame format
// allows), bounded by maxInflated. Readers are pooled: a frame with 4 MiB blocks
// (lz4-java's default) costs its block buffers once per reader, not per message.
func inflateLZ4(body []byte) ([]byte, error) {
	br := bytes.NewReader(body)
	zr, _ := lz4Readers.Get().(*lz4.Reader)
	if zr == nil {
		zr = lz4.NewReader(br)
	} else {
		zr.Reset(br)
	}
	out, err := readInflated(zr, len(body))
	if err != nil {
		return nil, err
	}
	zr.Reset(nil)
	lz4Readers.Put(zr)
	return out, nil
}

// readInflated reads r to its end into a buffer first sized for a body of
// n compressed bytes, growing it, and refuses more than maxInflated.
func readInflated(r io.Reader, n int) ([]byte, error) {
	out := make([]byte, 0, 4*n+64)
	for {
		if len(out) == cap(out) {
			if len(out) >= maxInflated {
				return nil, errInflatedTooLarge
			}
			out = append(out, 0)[:len(out)]
		}
		m, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+m]
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
