package client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/apogeemq/apogee/message"
)

// Each compression type RocketMQ 5 defines in the sysflag (bits 8-10) round-trips
// through the decoder the consumers use: zlib written with type 0 (what 4.x clients
// write) and with type ZLIB, zstd, and LZ4 frames.
func TestDecompressEachType(t *testing.T) {
	body := bytes.Repeat([]byte("request-reply and LZ4 bodies; "), 4000)
	zl, err := newCompressor(CompressionZlib, 5)
	if err != nil {
		t.Fatal(err)
	}
	zs, err := newCompressor(CompressionZstd, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer zs.close()
	zlibBody, zlibFlag, err := zl.compress(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	zstdBody, zstdFlag, err := zs.compress(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var lz bytes.Buffer
	w := lz4.NewWriter(&lz)
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		flag    int32
		payload []byte
	}{
		{"zlib type 0", zlibFlag, zlibBody},
		{"zlib type ZLIB", message.FlagCompressed | message.CompressionZLIB, zlibBody},
		{"zstd", zstdFlag, zstdBody},
		{"lz4", message.FlagCompressed | message.CompressionLZ4, lz.Bytes()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.payload) >= len(body) {
				t.Fatalf("%d bytes compressed from %d: not compressed", len(c.payload), len(body))
			}
			for range 3 { // pooled readers are reused
				got, err := decompress(c.payload, c.flag)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("%d bytes back, want %d", len(got), len(body))
				}
			}
		})
	}
	if _, err := decompress(zlibBody, message.FlagCompressed|0x400); !errors.Is(err, errUnsupportedCodec) {
		t.Fatalf("type 4: %v, want errUnsupportedCodec", err)
	}
}

// The frames RocketMQ's Java Lz4Compressor writes: lz4-java's LZ4FrameOutputStream
// with its defaults (FLG 0x60: version 1, independent blocks, no checksums; BD 0x70:
// 4 MiB blocks; HC 0x73), one block, then the end mark. apache/rocketmq's tests hold
// no vector written by Java (Lz4CompressorTest only round-trips "The quick brown fox
// jumps over the lazy dog"), so these are written by hand from the LZ4 frame
// specification and lz4-java's defaults: that sentence as lz4-java stores it (its 43
// bytes do not compress, so the block is stored raw, size's high bit set), and a
// compressed block (a literal run, a match, the final literals).
func TestDecompressLZ4JavaFrames(t *testing.T) {
	header := []byte{0x04, 0x22, 0x4d, 0x18, 0x60, 0x70, 0x73}
	end := []byte{0, 0, 0, 0}
	frame := func(size []byte, block []byte) []byte {
		f := append(append(append([]byte(nil), header...), size...), block...)
		return append(f, end...)
	}
	fox := []byte("The quick brown fox jumps over the lazy dog")
	cases := []struct {
		name  string
		frame []byte
		want  []byte
	}{
		{"raw block", frame([]byte{byte(len(fox)), 0, 0, 0x80}, fox), fox},
		{"compressed block", frame([]byte{13, 0, 0, 0}, []byte{
			0x3f, 'a', 'b', 'c', 0x03, 0x00, 0x0b, // 3 literals, match at distance 3 of 4+15+11 bytes
			0x50, 'x', 'y', 'z', 'z', 'y', // 5 final literals
		}), append(bytes.Repeat([]byte("abc"), 11), "xyzzy"...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decompress(c.frame, message.FlagCompressed|message.CompressionLZ4)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	if _, err := decompress([]byte{1, 2, 3}, message.FlagCompressed|message.CompressionLZ4); err == nil {
		t.Fatal("a 3-byte body decoded as an LZ4 frame (Lz4CompressorTest expects an error)")
	}
}

// An LZ4 body that inflates beyond maxInflated is refused, not allocated.
func TestDecompressLZ4Bounded(t *testing.T) {
	var lz bytes.Buffer
	w := lz4.NewWriter(&lz)
	zero := make([]byte, 1<<20)
	for range maxInflated>>20 + 8 {
		if _, err := w.Write(zero); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := decompress(lz.Bytes(), message.FlagCompressed|message.CompressionLZ4); !errors.Is(err, errInflatedTooLarge) {
		t.Fatalf("%d compressed bytes: %v, want errInflatedTooLarge", lz.Len(), err)
	}
}
