package rpc

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Hand-built msgpack for the conformance tests: each function returns the
// bytes of one value, encoded exactly as named, so that the tests send what
// a client in another language might, not what this package's encoder
// happens to write.

func mstr(s string) []byte {
	switch n := len(s); {
	case n < 32:
		return append([]byte{0xa0 | byte(n)}, s...)
	case n < 256:
		return append([]byte{0xd9, byte(n)}, s...)
	default:
		return append(binary.BigEndian.AppendUint16([]byte{0xda}, uint16(n)), s...)
	}
}

func mbin(s string) []byte { return append([]byte{0xc4, byte(len(s))}, s...) }

// mmap is a fixmap of the pairs kv (key, value, key, value...).
func mmap(kv ...[]byte) []byte {
	return append([]byte{0x80 | byte(len(kv)/2)}, slices.Concat(kv...)...)
}

// marr is a fixarray of vs.
func marr(vs ...[]byte) []byte { return append([]byte{0x90 | byte(len(vs))}, slices.Concat(vs...)...) }

func mfix(v byte) []byte             { return []byte{v} } // positive fixint, 0..127
func mu8(v uint8) []byte             { return []byte{0xcc, v} }
func mu16(v uint16) []byte           { return binary.BigEndian.AppendUint16([]byte{0xcd}, v) }
func mu32(v uint32) []byte           { return binary.BigEndian.AppendUint32([]byte{0xce}, v) }
func mu64(v uint64) []byte           { return binary.BigEndian.AppendUint64([]byte{0xcf}, v) }
func mi8(v int8) []byte              { return []byte{0xd0, byte(v)} }
func mi16(v int16) []byte            { return binary.BigEndian.AppendUint16([]byte{0xd1}, uint16(v)) }
func mi32(v int32) []byte            { return binary.BigEndian.AppendUint32([]byte{0xd2}, uint32(v)) }
func mi64(v int64) []byte            { return binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(v)) }
func mf64(v float64) []byte          { return binary.BigEndian.AppendUint64([]byte{0xcb}, math.Float64bits(v)) }
func mext(t, v byte) []byte          { return []byte{0xd4, t, v} } // fixext 1
func mbool(v bool) []byte            { return []byte{map[bool]byte{false: 0xc2, true: 0xc3}[v]} }
func mnegfix(v int8) []byte          { return []byte{byte(v)} } // negative fixint, -32..-1
func mraw(b ...byte) []byte          { return b }
func kv(k string, v []byte) [][]byte { return [][]byte{mstr(k), v} }

var mnil = []byte{0xc0}

// mreq is a request map: seq as a positive fixint, op, and body (none when
// nil).
func mreq(seq byte, op string, body []byte) []byte {
	if body == nil {
		return mmap(mstr("seq"), mfix(seq), mstr("op"), mstr(op))
	}
	return mmap(mstr("seq"), mfix(seq), mstr("op"), mstr(op), mstr("body"), body)
}

// mhello is {"version": 1, "client": "conformance"}.
func mhello() []byte { return mmap(mstr("version"), mfix(1), mstr("client"), mstr("conformance")) }

// decodeAny decodes a frame the server sent, for shape checks.
func decodeAny(t *testing.T, b []byte) map[string]any {
	t.Helper()
	if err := wire.Check(b); err != nil {
		t.Fatalf("the server sent malformed msgpack: %v", err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatalf("the server sent a frame that is not a map: %v (% x)", err, b)
	}
	return m
}

// shape checks that v is a map with exactly the keys of schema (those
// marked "?" may be absent), each of the type named: uint (the server
// writes uint 64), int (any integer encoding), str, bool, nil, map, array,
// any; "X|nil" allows nil too.
func shape(t *testing.T, what string, v any, schema map[string]string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: %T, want a map", what, v)
	}
	for k, typ := range schema {
		optional := typ[0] == '?'
		if optional {
			typ = typ[1:]
		}
		val, present := m[k]
		switch {
		case !present && !optional:
			t.Errorf("%s: key %q is missing", what, k)
		case present && !hasType(val, typ):
			t.Errorf("%s: key %q = %#v, want %s", what, k, val, typ)
		}
	}
	for k := range m {
		if _, ok := schema[k]; !ok {
			t.Errorf("%s: undocumented key %q", what, k)
		}
	}
	return m
}

func hasType(v any, typ string) bool {
	if base, ok := strings.CutSuffix(typ, "|nil"); ok {
		return v == nil || hasType(v, base)
	}
	switch v.(type) {
	case uint64:
		return typ == "uint" || typ == "int" || typ == "any"
	case int8, int16, int32, int64, uint8, uint16, uint32:
		return typ == "int" || typ == "any"
	case string:
		return typ == "str" || typ == "any"
	case bool:
		return typ == "bool" || typ == "any"
	case nil:
		return typ == "nil" || typ == "any"
	case map[string]any:
		return typ == "map" || typ == "any"
	case []any:
		return typ == "array" || typ == "any"
	}
	return false
}
