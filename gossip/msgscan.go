package gossip

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// The msgpack primitives of msgScanner. Each checks a declared length
// against the bytes the scanner may still hold before reading, so nothing is
// allocated for bytes that did not arrive.

// screenChunk is the first buffer of a scanner that reads from a stream.
const screenChunk = 4 << 10

// fill makes n bytes available from off, reading from src if needed.
func (s *msgScanner) fill(n uint64) error {
	if n > uint64(s.max-s.off) {
		return fmt.Errorf("%w: needs %d more bytes at offset %d, limit %d", errScreenTooLarge, n, s.off, s.max)
	}
	want := s.off + int(n)
	for len(s.buf) < want {
		if s.src == nil {
			return fmt.Errorf("%w: %d bytes short at offset %d", errScreenCut, want-len(s.buf), s.off)
		}
		if len(s.buf) == cap(s.buf) {
			s.grow()
		}
		m, err := s.src.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+m]
		if err != nil && len(s.buf) < want {
			return fmt.Errorf("%w at offset %d: %w", errScreenCut, len(s.buf), err)
		}
	}
	return nil
}

// grow doubles buf's capacity, up to max, so that what a scanner holds
// follows the bytes that arrived rather than the lengths they declare.
func (s *msgScanner) grow() {
	size := min(s.max, max(2*cap(s.buf), screenChunk))
	buf := make([]byte, len(s.buf), size)
	copy(buf, s.buf)
	s.buf = buf
}

// take consumes n bytes and returns them.
func (s *msgScanner) take(n uint64) ([]byte, error) {
	if err := s.fill(n); err != nil {
		return nil, err
	}
	b := s.buf[s.off : s.off+int(n)]
	s.off += int(n)
	return b, nil
}

func (s *msgScanner) skipBytes(n uint64) error {
	_, err := s.take(n)
	return err
}

func (s *msgScanner) byte() (byte, error) {
	b, err := s.take(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// uint reads a big-endian unsigned integer of size 1, 2, 4 or 8 bytes.
func (s *msgScanner) uint(size uint64) (uint64, error) {
	b, err := s.take(size)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// mapLen reads a map header.
func (s *msgScanner) mapLen() (uint64, error) {
	t, err := s.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case t >= 0x80 && t <= 0x8f:
		return uint64(t & 0x0f), nil
	case t == 0xde || t == 0xdf:
		return s.uint(2 << (t - 0xde))
	}
	return 0, fmt.Errorf("%w: type byte 0x%02x where a map was expected", errScreenBad, t)
}

// rawLen reads the header of a str or bin value and returns its length.
func (s *msgScanner) rawLen() (uint64, error) {
	t, err := s.byte()
	if err != nil {
		return 0, err
	}
	return s.rawLenOf(t)
}

// rawLenOf reads the length of a str or bin value of type byte t.
func (s *msgScanner) rawLenOf(t byte) (uint64, error) {
	switch {
	case t >= 0xa0 && t <= 0xbf:
		return uint64(t & 0x1f), nil
	case t == 0xd9 || t == 0xc4:
		return s.uint(1)
	case t == 0xda || t == 0xc5:
		return s.uint(2)
	case t == 0xdb || t == 0xc6:
		return s.uint(4)
	}
	return 0, fmt.Errorf("%w: type byte 0x%02x where a string was expected", errScreenBad, t)
}

// raw reads a str or bin value.
func (s *msgScanner) raw() ([]byte, error) {
	n, err := s.rawLen()
	if err != nil {
		return nil, err
	}
	return s.take(n)
}

// key reads a map key, which memberlist's structs need to be a string.
func (s *msgScanner) key() ([]byte, error) {
	return s.raw()
}

// int reads an integer as go-msgpack decodes it into an int (nil as 0).
func (s *msgScanner) int() (int64, error) {
	t, err := s.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case t <= 0x7f || t >= 0xe0: // positive and negative fixint
		return int64(int8(t)), nil
	case t == 0xc0: // nil
		return 0, nil
	case t >= 0xcc && t <= 0xcf: // uint8..uint64
		v, err := s.uint(1 << (t - 0xcc))
		return int64(v), err
	case t >= 0xd0 && t <= 0xd3: // int8..int64
		size := uint64(1) << (t - 0xd0)
		v, err := s.uint(size)
		return signExtend(v, size), err
	}
	return 0, fmt.Errorf("%w: type byte 0x%02x where an integer was expected", errScreenBad, t)
}

// signExtend interprets the low size bytes of v as a signed integer.
func signExtend(v, size uint64) int64 {
	shift := 64 - 8*size
	return int64(v<<shift) >> shift
}

// skip reads one msgpack value of any type, nested at depth.
func (s *msgScanner) skip(depth int) error {
	if depth > maxScreenDepth {
		return fmt.Errorf("%w: nested deeper than %d", errScreenBad, maxScreenDepth)
	}
	t, err := s.byte()
	if err != nil {
		return err
	}
	if n, ok := fixedSize(t); ok {
		return s.skipBytes(n)
	}
	switch {
	case t >= 0xa0 && t <= 0xbf, t >= 0xc4 && t <= 0xc6, t >= 0xd9 && t <= 0xdb:
		n, err := s.rawLenOf(t)
		if err != nil {
			return err
		}
		return s.skipBytes(n)
	case t >= 0xc7 && t <= 0xc9: // ext8, ext16, ext32: length, type, data
		n, err := s.uint(1 << (t - 0xc7))
		if err != nil {
			return err
		}
		return s.skipBytes(n + 1)
	case t >= 0x90 && t <= 0x9f:
		return s.skipElems(uint64(t&0x0f), depth)
	case t >= 0x80 && t <= 0x8f:
		return s.skipElems(2*uint64(t&0x0f), depth)
	case t == 0xdc || t == 0xdd:
		n, err := s.uint(2 << (t - 0xdc))
		if err != nil {
			return err
		}
		return s.skipElems(n, depth)
	case t == 0xde || t == 0xdf:
		n, err := s.uint(2 << (t - 0xde))
		if err != nil {
			return err
		}
		return s.skipElems(2*n, depth)
	}
	return fmt.Errorf("%w: type byte 0x%02x", errScreenBad, t) // 0xc1 is never used
}

// fixedSize returns how many bytes follow type byte t for the types whose
// size the type byte alone gives.
func fixedSize(t byte) (uint64, bool) {
	switch {
	case t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3: // fixint, nil, bool
		return 0, true
	case t == 0xcc || t == 0xd0: // uint8, int8
		return 1, true
	case t == 0xcd || t == 0xd1:
		return 2, true
	case t == 0xca || t == 0xce || t == 0xd2: // float32, uint32, int32
		return 4, true
	case t == 0xcb || t == 0xcf || t == 0xd3:
		return 8, true
	case t >= 0xd4 && t <= 0xd8: // fixext 1..16, plus the type byte
		return 1 + 1<<(t-0xd4), true
	}
	return 0, false
}

// skipElems skips n values. Each takes at least one byte, so n may not
// exceed the bytes the scanner may still hold.
func (s *msgScanner) skipElems(n uint64, depth int) error {
	if n > uint64(s.max-s.off) {
		return fmt.Errorf("%w: %d elements declared, at most %d bytes left", errScreenTooLarge, n, s.max-s.off)
	}
	for range n {
		if err := s.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// screenPacket checks a gossip packet: at most maxPacketBytes, and if it is
// plain memberlist, compressed at most once, at the top, into at most
// maxPacketBytes, with no compressed or compound part inside a compound.
// memberlist never sends anything else. Encrypted packets (which start with
// the encryption version, 0 or 1) pass, to be authenticated by memberlist.
func screenPacket(p []byte) error {
	if len(p) > maxPacketBytes {
		return fmt.Errorf("%w: packet of %d bytes, at most %d accepted", errScreenTooLarge, len(p), maxPacketBytes)
	}
	if len(p) >= 5 && p[0] == mlCRC {
		p = p[5:]
	}
	if len(p) > 0 && p[0] == mlCompress {
		s := &msgScanner{buf: p[1:], max: len(p) - 1}
		buf, err := s.compressed()
		if err != nil {
			return err
		}
		out := packetBuffers.Get().(*[maxPacketBytes + 1]byte)
		defer packetBuffers.Put(out)
		if p, err = inflateInto(buf, out[:]); err != nil {
			return err
		}
	}
	return screenBody(p)
}

// packetBuffers hold the payload of a compressed packet while it is
// screened.
var packetBuffers = sync.Pool{New: func() any { return new([maxPacketBytes + 1]byte) }}

// screenBody checks the plain body of a packet.
func screenBody(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	switch p[0] {
	case mlCompress, mlCRC, mlEncrypt, mlLabel:
		return fmt.Errorf("%w %d inside a packet", errScreenType, p[0])
	case mlCompound:
		return screenCompound(p[1:])
	}
	return nil
}

// screenCompound checks the parts of a compound message; memberlist
// reports truncation itself.
func screenCompound(p []byte) error {
	if len(p) < 1 || len(p) < 1+2*int(p[0]) {
		return nil
	}
	n := int(p[0])
	lengths, rest := p[1:1+2*n], p[1+2*n:]
	for i := range n {
		size := int(binary.BigEndian.Uint16(lengths[2*i:]))
		if size > len(rest) {
			return nil
		}
		if size > 0 && (rest[0] == mlCompress || rest[0] == mlCompound) {
			return fmt.Errorf("%w %d inside a compound message", errScreenType, rest[0])
		}
		rest = rest[size:]
	}
	return nil
}
