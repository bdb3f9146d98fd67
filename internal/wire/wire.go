// Package wire owns the framing shared by tenure's two byte protocols: the
// local Unix-socket protocol (package rpc) and the peer transport between
// agents (package gossip).
//
// A frame is a 4-byte big-endian length followed by that many bytes of
// msgpack. Readers bound the length before allocating, and Unmarshal walks the
// msgpack structure (Check) before decoding it, because msgpack decoders may
// allocate from a declared collection length before reading the data: a
// 10-byte frame could otherwise ask for gigabytes.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// DefaultMaxFrame is the frame size limit used when a caller gives none.
const DefaultMaxFrame = 64 << 10

// MaxDepth bounds the nesting of arrays and maps in a decoded value.
const MaxDepth = 32

// HeaderSize is the size of the length prefix in front of every frame.
const HeaderSize = 4

var (
	// ErrFrameTooLarge reports a frame whose declared length exceeds the limit.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed reports bytes that are not one well-formed msgpack value.
	ErrMalformed = errors.New("wire: malformed msgpack")
)

// WriteFrame writes body as one frame: the length prefix and body in a single
// Write call, so concurrent writers serialised by a mutex never interleave.
func WriteFrame(w io.Writer, body []byte) error {
	buf := make([]byte, HeaderSize+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[HeaderSize:], body)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("wire: write frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame of at most max bytes (DefaultMaxFrame if max <= 0).
// A longer declared length returns an error wrapping ErrFrameTooLarge without
// reading or allocating the body; the stream is then out of step and the
// caller should close it. A clean end of stream before any byte returns io.EOF.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("wire: read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("wire: read frame body (%d bytes): %w", n, err)
	}
	return body, nil
}

// Marshal encodes v as msgpack, using struct field names given by msgpack tags.
func Marshal(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("wire: encode %T: %w", v, err)
	}
	return b, nil
}

// Unmarshal checks that b holds exactly one well-formed msgpack value whose
// declared lengths fit in b (see Check), then decodes it into v.
func Unmarshal(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: decode %T: %v", ErrMalformed, v, err)
	}
	return nil
}
