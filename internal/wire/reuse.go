package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// keepBuffer is the largest buffer an Encoder keeps between calls; one grown
// beyond it for a large frame is let go, so that a connection which once
// sent a large member list does not hold the memory for its whole life.
const keepBuffer = 64 << 10

// Encoder encodes values as Marshal does, and frames as WriteFrame writes
// them, into memory it reuses from one call to the next: a connection that
// sends many small frames allocates nothing for them. The bytes a call
// returns are valid only until the next call. An Encoder is not safe for
// concurrent use; its zero value is ready to use.
type Encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// Marshal returns the msgpack encoding of v, the bytes Marshal returns.
func (e *Encoder) Marshal(v any) ([]byte, error) {
	if err := e.encode(v, 0); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// Frame returns v encoded as one frame: the length prefix, then the bytes
// Marshal returns, ready for a single Write (the bytes WriteFrame writes).
// The body's length is len(frame) - HeaderSize.
func (e *Encoder) Frame(v any) ([]byte, error) {
	if err := e.encode(v, HeaderSize); err != nil {
		return nil, err
	}
	b := e.buf.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-HeaderSize))
	return b, nil
}

// encode leaves in the buffer room bytes of zeros, then v's encoding.
func (e *Encoder) encode(v any, room int) error {
	if e.buf.Cap() > keepBuffer {
		e.buf = bytes.Buffer{}
	}
	e.buf.Reset()
	if e.enc == nil {
		e.enc = msgpack.NewEncoder(&e.buf)
	}
	var zeros [HeaderSize]byte
	e.buf.Write(zeros[:room])
	if err := e.enc.Encode(v); err != nil {
		return fmt.Errorf("wire: encode %T: %w", v, err)
	}
	return nil
}

// Decoder decodes as Unmarshal does, reusing its msgpack decoder from one
// call to the next. Decoded values never share memory with the input, so
// the caller may reuse b at once. A Decoder is not safe for concurrent
// use; its zero value is ready to use.
type Decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

// Unmarshal checks that b holds exactly one well-formed msgpack value whose
// declared lengths fit in b (see Check), then decodes it into v.
func (d *Decoder) Unmarshal(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	d.r.Reset(b)
	if d.dec == nil {
		d.dec = msgpack.NewDecoder(&d.r)
	} else {
		d.dec.Reset(&d.r)
	}
	if err := d.dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decode %T: %v", ErrMalformed, v, err)
	}
	return nil
}
