package gossip

import (
	"bytes"
	"compress/lzw"
	"errors"
	"fmt"
	"io"
	"sync"
)

// This file reads the first bytes of what arrives on the gossip port, before
// memberlist sees them, and refuses what would make memberlist allocate far
// more than a cluster of the configured size needs. It follows memberlist
// v0.7.0's formats (net.go, util.go, label.go there):
//
//	stream:  [label?] message
//	message: encryptMsg, uint32 length, that many bytes (opaque here)
//	       | compressMsg, msgpack {Algo: 0, Buf: LZW bytes} holding one plain message
//	       | plain message
//	plain:   pushPullMsg, header {Nodes, UserStateLen, Join}, Nodes msgpack
//	         values, UserStateLen raw bytes
//	       | userMsg, header {UserMsgLen}, UserMsgLen raw bytes
//	       | pingMsg, one msgpack value
//
//	packet:  [hasCrcMsg, crc32] [compressMsg {Algo, Buf}] body
//	body:    compoundMsg, count, count uint16 lengths, parts | one message
//
// memberlist decodes msgpack with hashicorp/go-msgpack, which reads a struct
// from a map (keys compared exactly, the last of duplicate keys winning,
// unknown keys skipped) or from an array. The screen accepts only the map
// form memberlist writes, checks every occurrence of a bounded field, and
// takes the last, so whatever it passes decodes within the bounds.

// memberlist's message type bytes (memberlist v0.7.0, net.go).
const (
	mlPing     = 0
	mlPushPull = 6
	mlCompound = 7
	mlUser     = 8
	mlCompress = 9
	mlEncrypt  = 10
	mlCRC      = 12
	mlLabel    = 244
)

// Bounds of what memberlist's peers send, used to size screenLimits.
const (
	// streamBytesPerMember bounds what one member adds to a push-pull: its
	// node state (name, address, up to 512 bytes of tags, versions and
	// msgpack field names, about 700 bytes with a 128-byte name) and serf's
	// entry for it (its name and a clock).
	streamBytesPerMember = 1 << 10
	// streamBaseBytes is the rest of a push-pull: headers and serf's clocks
	// and recent events.
	streamBaseBytes = 32 << 10
	// maxPacketBytes bounds a gossip packet, and the payload of a compressed
	// one. memberlist packs its packets to UDPBufferSize (1400 bytes by
	// default) before compression, labels and encryption.
	maxPacketBytes = 8 << 10
	// maxScreenDepth bounds msgpack nesting; memberlist's messages nest at
	// most two levels.
	maxScreenDepth = 16
)

// screenLimits bounds what the screen lets through to memberlist.
type screenLimits struct {
	members     int // most members a push-pull may list
	streamBytes int // most bytes of a stream's first message, and of its decompressed payload
}

// limitsFor returns the limits for clusters of at most members members.
func limitsFor(members int) screenLimits {
	return screenLimits{members: members, streamBytes: streamBaseBytes + members*streamBytesPerMember}
}

// Screen failures, wrapped by the errors of screenStream and screenPacket.
// Each is one reason in the refusal log.
var (
	errScreenTooLarge = errors.New("larger than a cluster of the configured size needs")
	errScreenMembers  = errors.New("lists more members than the configured maximum")
	errScreenBad      = errors.New("malformed")
	errScreenType     = errors.New("unexpected message type")
	errScreenCut      = errors.New("ended early")
)

// screenReason names err's kind for the refusal log.
func screenReason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{
		{errScreenTooLarge, "too_large"}, {errScreenMembers, "too_many_members"},
		{errScreenBad, "malformed"}, {errScreenType, "unexpected_type"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return "too_slow"
	}
	return "incomplete"
}

// msgScanner reads msgpack and raw bytes from a buffer that it fills from
// src as needed, never holding more than max bytes.
type msgScanner struct {
	src io.Reader // nil when buf holds everything
	buf []byte
	off int // bytes consumed
	max int
}

// screenStream reads the first message of an inbound gossip stream from r
// and returns its bytes (at most lim.streamBytes), or an error wrapping one
// of the errScreen errors or r's error.
func screenStream(r io.Reader, lim screenLimits) ([]byte, error) {
	s := &msgScanner{src: r, max: lim.streamBytes}
	if err := s.streamMessage(lim); err != nil {
		return nil, err
	}
	return s.buf[:s.off], nil
}

func (s *msgScanner) streamMessage(lim screenLimits) error {
	t, err := s.byte()
	if err != nil {
		return err
	}
	switch t {
	case mlEncrypt:
		n, err := s.uint(4)
		if err != nil {
			return err
		}
		return s.skipBytes(n)
	case mlCompress:
		plain, err := s.decompress(lim.streamBytes)
		if err != nil {
			return err
		}
		inner := &msgScanner{buf: plain, max: len(plain)}
		t, err := inner.byte()
		if err != nil {
			return err
		}
		return inner.plainMessage(t, lim)
	case mlLabel:
		return fmt.Errorf("%w: labelled stream (this cluster uses no label)", errScreenType)
	}
	return s.plainMessage(t, lim)
}

// plainMessage reads the rest of an unencrypted, uncompressed message of
// type t.
func (s *msgScanner) plainMessage(t byte, lim screenLimits) error {
	switch t {
	case mlPushPull:
		return s.pushPull(lim)
	case mlUser:
		f, err := s.header("UserMsgLen")
		if err != nil {
			return err
		}
		return s.skipBytes(uint64(f[0]))
	case mlPing:
		return s.skip(0)
	}
	return fmt.Errorf("%w %d on a stream", errScreenType, t)
}

// pushPull reads a push-pull whose header lists at most lim.members nodes.
func (s *msgScanner) pushPull(lim screenLimits) error {
	f, err := s.header("Nodes", "UserStateLen")
	if err != nil {
		return err
	}
	if f[0] > int64(lim.members) {
		return fmt.Errorf("%w: push-pull lists %d members, at most %d accepted", errScreenMembers, f[0], lim.members)
	}
	for range f[0] {
		if err := s.skip(0); err != nil {
			return err
		}
	}
	return s.skipBytes(uint64(f[1]))
}

// header reads a msgpack map and returns the integer values of the given
// keys (0 if absent), each from 0 to the bytes the scanner may hold. A value
// must be an integer or nil (which decodes as 0); a key given twice is
// refused, since memberlist never writes one twice and its decoder would
// keep the last.
func (s *msgScanner) header(keys ...string) ([]int64, error) {
	n, err := s.mapLen()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	seen := make([]bool, len(keys))
	for range n {
		key, err := s.key()
		if err != nil {
			return nil, err
		}
		i := indexOf(keys, key)
		if i < 0 {
			if err := s.skip(1); err != nil {
				return nil, err
			}
			continue
		}
		if seen[i] {
			return nil, fmt.Errorf("%w: %s given twice", errScreenBad, key)
		}
		seen[i] = true
		if out[i], err = s.length(key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func indexOf(keys []string, key []byte) int {
	for i, k := range keys {
		if string(key) == k {
			return i
		}
	}
	return -1
}

// length reads a count or length: an integer from 0 to the bytes the
// scanner may hold (each counted thing takes a byte at least), or nil as 0.
func (s *msgScanner) length(name []byte) (int64, error) {
	v, err := s.int()
	if err != nil {
		return 0, err
	}
	if v < 0 || v > int64(s.max) {
		return 0, fmt.Errorf("%w: %s is %d; a message holds at most %d bytes", errScreenTooLarge, name, v, s.max)
	}
	return v, nil
}

// decompress reads memberlist's compress struct {Algo, Buf} and returns
// Buf's LZW payload, which must not exceed limit bytes.
func (s *msgScanner) decompress(limit int) ([]byte, error) {
	buf, err := s.compressed()
	if err != nil {
		return nil, err
	}
	return inflate(buf, limit)
}

// compressed reads memberlist's compress struct {Algo, Buf} and returns
// Buf, which must be LZW (Algo 0).
func (s *msgScanner) compressed() ([]byte, error) {
	n, err := s.mapLen()
	if err != nil {
		return nil, err
	}
	var algo int64
	var buf []byte
	for range n {
		key, err := s.key()
		if err != nil {
			return nil, err
		}
		switch string(key) {
		case "Algo":
			algo, err = s.int()
		case "Buf":
			buf, err = s.raw()
		default:
			err = s.skip(1)
		}
		if err != nil {
			return nil, err
		}
	}
	if algo != 0 {
		return nil, fmt.Errorf("%w: compression algorithm %d", errScreenBad, algo)
	}
	return buf, nil
}

// lzwReaders are reused: each holds about 20 KiB of tables, and a flood of
// compressed packets would otherwise allocate one per packet.
var lzwReaders = sync.Pool{New: func() any { return lzw.NewReader(nil, lzw.LSB, 8) }}

// inflate returns the LZW payload of buf, as memberlist compresses it, if it
// is not empty and at most limit bytes.
func inflate(buf []byte, limit int) ([]byte, error) {
	r := lzwReaders.Get().(*lzw.Reader)
	defer lzwReaders.Put(r)
	r.Reset(bytes.NewReader(buf), lzw.LSB, 8)
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	return checkInflated(out, err, limit)
}

// inflateInto is inflate writing into out, whose length is the limit plus
// one, and returning a prefix of it.
func inflateInto(buf, out []byte) ([]byte, error) {
	r := lzwReaders.Get().(*lzw.Reader)
	defer lzwReaders.Put(r)
	r.Reset(bytes.NewReader(buf), lzw.LSB, 8)
	n := 0
	for n < len(out) {
		m, err := r.Read(out[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return checkInflated(nil, err, len(out)-1)
		}
	}
	return checkInflated(out[:n], nil, len(out)-1)
}

func checkInflated(out []byte, err error, limit int) ([]byte, error) {
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: compressed payload: %w", errScreenBad, err)
	case len(out) > limit:
		return nil, fmt.Errorf("%w: compressed payload exceeds %d bytes", errScreenTooLarge, limit)
	case len(out) == 0:
		return nil, fmt.Errorf("%w: empty compressed payload", errScreenBad)
	}
	return out, nil
}
