package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

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
	zstdOnce    sync.Once
	zstdDec     *zstd.Decoder
	zstdErr     error
)

// errUnsupportedCodec: the body's compression type is not one this client reads (LZ4).
var errUnsupportedCodec = errors.New("client: unsupported compression type")

// decompress inflates a stored body according to its sysflag: compression type 0 or
// ZLIB is zlib, ZSTD is zstd; LZ4 is not supported. The result is a new slice.
func decompress(body []byte, sysFlag int32) ([]byte, error) {
	switch sysFlag & message.CompressionMask {
	case 0, message.CompressionZLIB:
		return inflateZlib(body)
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
	out := make([]byte, 0, 4*len(body)+64)
	for {
		if len(out) == cap(out) {
			if len(out) >= maxInflated {
				return nil, fmt.Errorf("client: inflated body over %d bytes", maxInflated)
			}
			out = append(out, 0)[:len(out)]
		}
		n, err := zr.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	zlibReaders.Put(zr)
	return out, nil
}
