package rpc

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The server decodes what clients send strictly, by the types
// docs/PROTOCOL.md gives (section 3): a frame or body is a msgpack map with
// str keys; a uint is any integer encoding with a value of at least 0; an
// int is any integer that fits in 64 signed bits; a str is msgpack str
// holding UTF-8 (never bin); a bool is true or false; nil is accepted only
// where the type says "| nil". Unknown keys are skipped, a missing key is
// the zero value, and a known key given twice is refused. Anything else is
// bad_request. The msgpack library alone would accept an array for a map, a
// negative number for a uint (wrapping it) and bin for a str.

// field is one key of a map a client sends, and where its value goes: a
// *uint64 (uint), *int64 (int), *string (str), *bool (bool) or
// *msgpack.RawMessage (any value, kept as msgpack for a later decode).
type field struct {
	key      string
	dst      any
	required bool // a missing key is bad_request, not the zero value
}

// strictDecoder is a msgpack decoder and its reader, kept in
// strictDecoders between the calls of decodeStrict, which every request
// makes.
type strictDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var strictDecoders = sync.Pool{New: func() any {
	d := new(strictDecoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// decodeStrict checks that b is one well-formed msgpack value (wire.Check)
// and decodes it, a map, into fields. Errors wrap ErrBadRequest and name
// the key at fault.
func decodeStrict(b []byte, fields []field) error {
	if err := wire.Check(b); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	sd := strictDecoders.Get().(*strictDecoder)
	sd.r.Reset(b)
	sd.dec.Reset(&sd.r)
	err := decodeMap(sd.dec, fields)
	sd.r.Reset(nil) // keep no request in the pool
	strictDecoders.Put(sd)
	return err
}

// decodeMap decodes the map dec holds into fields.
func decodeMap(dec *msgpack.Decoder, fields []field) error {
	if c, _ := dec.PeekCode(); !isMapCode(c) {
		return fmt.Errorf("%w: want a map, got %s", ErrBadRequest, typeName(c))
	}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	seen := make([]bool, len(fields))
	for range n {
		if err := decodeEntry(dec, fields, seen); err != nil {
			return err
		}
	}
	for i, f := range fields {
		if f.required && !seen[i] {
			return fmt.Errorf("%w: key %q is missing", ErrBadRequest, f.key)
		}
	}
	return nil
}

// decodeEntry decodes one key and its value into the field of that key,
// or skips the value of an unknown key.
func decodeEntry(dec *msgpack.Decoder, fields []field, seen []bool) error {
	key, err := decodeStr(dec)
	if err != nil {
		return fmt.Errorf("%w: a map key: %v", ErrBadRequest, err)
	}
	for i, f := range fields {
		if f.key != key {
			continue
		}
		if seen[i] {
			return fmt.Errorf("%w: key %q appears twice", ErrBadRequest, key)
		}
		seen[i] = true
		if err := decodeValue(dec, f.dst); err != nil {
			return fmt.Errorf("%w: key %q: %v", ErrBadRequest, key, err)
		}
		return nil
	}
	if err := dec.Skip(); err != nil {
		return fmt.Errorf("%w: key %q: %v", ErrBadRequest, key, err)
	}
	return nil
}

// decodeValue decodes the next value into dst, one of field's types.
func decodeValue(dec *msgpack.Decoder, dst any) error {
	var err error
	switch p := dst.(type) {
	case *uint64:
		*p, err = decodeUint(dec)
	case *int64:
		*p, err = decodeInt(dec)
	case *string:
		*p, err = decodeStr(dec)
	case *bool:
		*p, err = decodeBool(dec)
	case *msgpack.RawMessage:
		*p, err = dec.DecodeRaw()
	default:
		err = fmt.Errorf("no decoder for %T", dst) // a bug in a field list
	}
	return err
}

// decodeUint reads a uint: an integer of any encoding, at least 0.
func decodeUint(dec *msgpack.Decoder) (uint64, error) {
	c, _ := dec.PeekCode()
	switch {
	case c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64):
		return dec.DecodeUint64()
	case isSignedCode(c):
		v, err := dec.DecodeInt64()
		if err == nil && v < 0 {
			return 0, fmt.Errorf("want a uint, got the negative int %d", v)
		}
		return uint64(v), err
	}
	return 0, fmt.Errorf("want a uint, got %s", typeName(c))
}

// decodeInt reads an int: an integer of any encoding that fits in 64
// signed bits.
func decodeInt(dec *msgpack.Decoder) (int64, error) {
	c, _ := dec.PeekCode()
	switch {
	case c == msgpcode.Uint64:
		v, err := dec.DecodeUint64()
		if err == nil && v > math.MaxInt64 {
			return 0, fmt.Errorf("want an int, got %d, beyond 64 signed bits", v)
		}
		return int64(v), err
	case msgpcode.IsFixedNum(c) || isSignedCode(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint32):
		return dec.DecodeInt64()
	}
	return 0, fmt.Errorf("want an int, got %s", typeName(c))
}

// decodeStr reads a str holding UTF-8.
func decodeStr(dec *msgpack.Decoder) (string, error) {
	c, _ := dec.PeekCode()
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("want a str, got %s", typeName(c))
	}
	s, err := dec.DecodeString()
	if err == nil && !utf8.ValidString(s) {
		return "", fmt.Errorf("a str that is not UTF-8")
	}
	return s, err
}

// decodeBool reads true or false.
func decodeBool(dec *msgpack.Decoder) (bool, error) {
	c, _ := dec.PeekCode()
	if c != msgpcode.True && c != msgpcode.False {
		return false, fmt.Errorf("want a bool, got %s", typeName(c))
	}
	return dec.DecodeBool()
}

func isMapCode(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isSignedCode(c byte) bool { return c >= msgpcode.Int8 && c <= msgpcode.Int64 }

// typeName names the msgpack type of the value starting with c, for errors.
func typeName(c byte) string {
	switch {
	case c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64):
		return "a uint"
	case msgpcode.IsFixedNum(c) || isSignedCode(c):
		return "an int"
	case c == msgpcode.Nil:
		return "nil"
	case c == msgpcode.True || c == msgpcode.False:
		return "a bool"
	case c == msgpcode.Float || c == msgpcode.Double:
		return "a float"
	case msgpcode.IsString(c):
		return "a str"
	case msgpcode.IsBin(c):
		return "bin"
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return "an array"
	case isMapCode(c):
		return "a map"
	case msgpcode.IsExt(c):
		return "an ext"
	}
	return fmt.Sprintf("type byte 0x%02x", c)
}

// isNil reports whether an optional value is absent or msgpack nil.
func isNil(raw msgpack.RawMessage) bool {
	return len(raw) == 0 || (len(raw) == 1 && raw[0] == msgpcode.Nil)
}

// decodeBody decodes a body the op requires: a map of fields.
func decodeBody(body msgpack.RawMessage, fields []field) error {
	if len(body) == 0 {
		return fmt.Errorf("%w: the request needs a body", ErrBadRequest)
	}
	return decodeStrict(body, fields)
}

// decodeOptional decodes a body that may be absent or nil, else a map of
// fields.
func decodeOptional(body msgpack.RawMessage, fields []field) error {
	if isNil(body) {
		return nil
	}
	return decodeStrict(body, fields)
}

// parseHello decodes a client's first frame.
func parseHello(b []byte) (Hello, error) {
	var h Hello
	var version uint64
	err := decodeStrict(b, []field{{key: "version", dst: &version, required: true}, {key: "client", dst: &h.Client}})
	if err != nil {
		return Hello{}, err
	}
	h.Version = &version
	return h, nil
}

// parseRequest decodes a request frame: seq (at least 1), op and body.
func parseRequest(b []byte) (Request, error) {
	var r Request
	if err := decodeStrict(b, []field{{key: "seq", dst: &r.Seq, required: true}, {key: "op", dst: &r.Op}, {key: "body", dst: &r.Body}}); err != nil {
		return Request{}, err
	}
	if r.Seq == 0 {
		return Request{}, fmt.Errorf("%w: seq must be at least 1", ErrBadRequest)
	}
	return r, nil
}

// Field lists of the request bodies.

func (r *CheckRequest) fields() []field      { return []field{{key: "epoch", dst: &r.Epoch}} }
func (r *ResignRequest) fields() []field     { return []field{{key: "hold_ms", dst: &r.HoldMS}} }
func (r *DrainRequest) fields() []field      { return []field{{key: "off", dst: &r.Off}} }
func (r *TransferRequest) fields() []field   { return []field{{key: "name", dst: &r.Name}} }
func (r *ForceLeaveRequest) fields() []field { return []field{{key: "name", dst: &r.Name}} }
func (r *StoppedRequest) fields() []field    { return []field{{key: "epoch", dst: &r.Epoch}} }
func (r *RunnerRequest) fields() []field     { return []field{{key: "grace_ms", dst: &r.GraceMS}} }
func (r *KeysRequest) fields() []field {
	return []field{{key: "action", dst: &r.Action}, {key: "key", dst: &r.Key}}
}
func (r *RunningRequest) fields() []field {
	return []field{{key: "epoch", dst: &r.Epoch}, {key: "pgid", dst: &r.PGID}}
}

// parseWatchRequest decodes a watch's optional body: nil, or a map whose
// runner is nil or a runner map.
func parseWatchRequest(body msgpack.RawMessage) (WatchRequest, error) {
	var runner msgpack.RawMessage
	if err := decodeOptional(body, []field{{key: "runner", dst: &runner}}); err != nil {
		return WatchRequest{}, err
	}
	if isNil(runner) {
		return WatchRequest{}, nil
	}
	var r RunnerRequest
	if err := decodeStrict(runner, r.fields()); err != nil {
		return WatchRequest{}, fmt.Errorf("%w: runner: %s", ErrBadRequest, trimSentinel(err.Error(), ErrBadRequest))
	}
	return WatchRequest{Runner: &r}, nil
}
