package wire

import (
	"encoding/binary"
	"fmt"
)

// Check reports whether b holds exactly one msgpack value in which every
// declared length (of strings, binaries, extensions, arrays and maps) fits in
// the bytes that remain, and nesting stays within MaxDepth. Each array or map
// element takes at least one byte, so a collection cannot declare more
// elements than bytes are left. Check allocates nothing.
func Check(b []byte) error {
	c := checker{b: b}
	if err := c.value(0); err != nil {
		return err
	}
	if c.off != len(b) {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-c.off)
	}
	return nil
}

type checker struct {
	b   []byte
	off int
}

func (c *checker) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, what, c.off)
}

// take consumes n bytes and reports whether they were there.
func (c *checker) take(n uint64) bool {
	if n > uint64(len(c.b)-c.off) {
		return false
	}
	c.off += int(n)
	return true
}

// uint reads a big-endian unsigned integer of size bytes.
func (c *checker) uint(size int) (uint64, bool) {
	if size > len(c.b)-c.off {
		return 0, false
	}
	p := c.b[c.off : c.off+size]
	c.off += size
	switch size {
	case 1:
		return uint64(p[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), true
	default:
		return uint64(binary.BigEndian.Uint32(p)), true
	}
}

// value walks one msgpack value.
func (c *checker) value(depth int) error {
	if depth > MaxDepth {
		return c.fail("nesting too deep")
	}
	if c.off >= len(c.b) {
		return c.fail("truncated value")
	}
	t := c.b[c.off]
	c.off++
	switch {
	case t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3: // fixint, nil, bool
		return nil
	case t >= 0xa0 && t <= 0xbf: // fixstr
		return c.payload(uint64(t & 0x1f))
	case t >= 0x90 && t <= 0x9f: // fixarray
		return c.elems(uint64(t&0x0f), depth)
	case t >= 0x80 && t <= 0x8f: // fixmap
		return c.elems(2*uint64(t&0x0f), depth)
	}
	switch t {
	case 0xcc, 0xd0: // uint8, int8
		return c.payload(1)
	case 0xcd, 0xd1: // uint16, int16
		return c.payload(2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return c.payload(4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return c.payload(8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 (+1 type byte)
		return c.payload(1 + 1<<(t-0xd4))
	case 0xd9, 0xc4: // str8, bin8
		return c.sized(1, 0)
	case 0xda, 0xc5: // str16, bin16
		return c.sized(2, 0)
	case 0xdb, 0xc6: // str32, bin32
		return c.sized(4, 0)
	case 0xc7: // ext8
		return c.sized(1, 1)
	case 0xc8: // ext16
		return c.sized(2, 1)
	case 0xc9: // ext32
		return c.sized(4, 1)
	case 0xdc, 0xdd: // array16, array32
		n, ok := c.uint(2 << (t - 0xdc))
		if !ok {
			return c.fail("truncated array length")
		}
		return c.elems(n, depth)
	case 0xde, 0xdf: // map16, map32
		n, ok := c.uint(2 << (t - 0xde))
		if !ok {
			return c.fail("truncated map length")
		}
		return c.elems(2*n, depth)
	}
	return c.fail(fmt.Sprintf("unknown type byte 0x%02x", t)) // 0xc1 is never used
}

func (c *checker) payload(n uint64) error {
	if !c.take(n) {
		return c.fail(fmt.Sprintf("declared %d bytes, %d remain", n, len(c.b)-c.off))
	}
	return nil
}

// sized reads a length of lenSize bytes, then skips extra bytes (an ext's type)
// and the payload.
func (c *checker) sized(lenSize int, extra uint64) error {
	n, ok := c.uint(lenSize)
	if !ok {
		return c.fail("truncated length")
	}
	return c.payload(n + extra)
}

func (c *checker) elems(n uint64, depth int) error {
	if n > uint64(len(c.b)-c.off) {
		return c.fail(fmt.Sprintf("declared %d elements, %d bytes remain", n, len(c.b)-c.off))
	}
	for i := uint64(0); i < n; i++ {
		if err := c.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
