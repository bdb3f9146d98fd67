package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestEncoderMatchesMarshalAndWriteFrame: an Encoder's bytes are those of
// Marshal and WriteFrame, call after call, through a large value that makes
// it let its buffer go and small ones after it.
func TestEncoderMatchesMarshalAndWriteFrame(t *testing.T) {
	values := []any{
		sample{Name: "n1", List: []uint64{1, 1 << 40}, Map: map[string]string{"a": "b"}},
		sample{Name: strings.Repeat("x", 2*keepBuffer)},
		nil,
		sample{Bytes: []byte{0, 1}},
	}
	var e Encoder
	for i, v := range values {
		want, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var frame bytes.Buffer
		if err := WriteFrame(&frame, want); err != nil {
			t.Fatal(err)
		}
		got, err := e.Marshal(v)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("value %d: Marshal = %x, %v; want %x", i, got, err, want)
		}
		got, err = e.Frame(v)
		if err != nil || !bytes.Equal(got, frame.Bytes()) {
			t.Fatalf("value %d: Frame = %x, %v; want %x", i, got, err, frame.Bytes())
		}
	}
	if e.buf.Cap() > keepBuffer {
		t.Fatalf("the encoder kept a buffer of %d bytes after small frames", e.buf.Cap())
	}
}

func TestEncoderError(t *testing.T) {
	var e Encoder
	if _, err := e.Frame(make(chan int)); err == nil || !strings.Contains(err.Error(), "wire: encode chan int") {
		t.Fatalf("Frame(chan) = %v, want a wire: encode error", err)
	}
}

// TestDecoderMatchesUnmarshal: a Decoder decodes what Unmarshal decodes,
// refuses what it refuses, and keeps nothing of its input.
func TestDecoderMatchesUnmarshal(t *testing.T) {
	in := sample{Name: "n1", List: []uint64{1, 1 << 40}, Map: map[string]string{"a": "b"}, Bytes: []byte{0, 1}}
	good, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var d Decoder
	for i := 0; i < 2; i++ {
		b := bytes.Clone(good)
		var out sample
		if err := d.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		clear(b) // the decoded value must not share b's memory
		if out.Name != "n1" || len(out.List) != 2 || out.Map["a"] != "b" || !bytes.Equal(out.Bytes, []byte{0, 1}) {
			t.Fatalf("round %d: decoded %+v", i, out)
		}
		for _, bad := range [][]byte{good[:len(good)-1], append(bytes.Clone(good), 0xc0), {0xdd, 0xff, 0xff, 0xff, 0xff}} {
			var out sample
			if err := d.Unmarshal(bad, &out); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmarshal(%x) = %v, want ErrMalformed", bad, err)
			}
		}
	}
}
