package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

type sample struct {
	Name  string            `msgpack:"name"`
	List  []uint64          `msgpack:"list"`
	Map   map[string]string `msgpack:"map"`
	Bytes []byte            `msgpack:"bytes"`
	Ext   any               `msgpack:"ext"`
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := sample{Name: "n1", List: []uint64{1, 1 << 40}, Map: map[string]string{"a": "b"}, Bytes: []byte{0, 1}}
	b, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out sample
	if err := Unmarshal(got, &out); err != nil {
		t.Fatal(err)
	}
	if out.Name != in.Name || len(out.List) != 2 || out.Map["a"] != "b" {
		t.Fatalf("round trip = %+v", out)
	}
	if _, err := ReadFrame(&buf, 0); err != io.EOF {
		t.Fatalf("read at end = %v, want io.EOF", err)
	}
}

func TestReadFrameRejectsOversizeWithoutReading(t *testing.T) {
	r := bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	if _, err := ReadFrame(r, 1024); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if r.Len() != 3 {
		t.Fatalf("read %d body bytes of an oversized frame", 3-r.Len())
	}
}

func TestReadFrameTruncated(t *testing.T) {
	for _, in := range [][]byte{{0, 0}, {0, 0, 0, 5, 1, 2}} {
		if _, err := ReadFrame(bytes.NewReader(in), 0); err == nil || err == io.EOF {
			t.Fatalf("ReadFrame(%x) = %v, want a truncation error", in, err)
		}
	}
}

// TestCheckRejectsHugeDeclaredLengths proves the allocation guard: tiny
// inputs that declare billions of elements or bytes are refused before the
// msgpack decoder can allocate for them.
func TestCheckRejectsHugeDeclaredLengths(t *testing.T) {
	cases := map[string][]byte{
		"array32":  {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"map32":    {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01, 0x01},
		"str32":    {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
		"bin32":    {0xc6, 0x10, 0x00, 0x00, 0x00},
		"ext32":    {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nested":   append(bytes.Repeat([]byte{0x91}, MaxDepth+2), 0x01),
		"trailing": {0x01, 0x02},
		"unused":   {0xc1},
		"empty":    {},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if err := Check(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check(%x) = %v, want ErrMalformed", b, err)
			}
			var v struct {
				List []sample `msgpack:"list"`
			}
			if err := Unmarshal(b, &v); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmarshal = %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	b, _ := Marshal(sample{Name: "x", List: []uint64{1, 2}, Map: map[string]string{"k": "v"}, Ext: 1.5})
	f.Add(b)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data) != nil {
			return
		}
		// Whatever Check accepts is one whole msgpack value to the decoder.
		r := bytes.NewReader(data)
		if err := msgpack.NewDecoder(r).Skip(); err != nil || r.Len() != 0 {
			t.Fatalf("Check accepted %x but the decoder skipped it with %v, %d bytes left", data, err, r.Len())
		}
	})
}
