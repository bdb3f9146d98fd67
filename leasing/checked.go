package leasing

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"strconv"
	"strings"
)

// encodeChecked renders a persisted state file: a header line naming the
// format, the body (one or more newline-terminated lines), and a last line
// "crc32 XXXXXXXX" over header and body. Every state file tenure keeps uses
// this shape, so a torn or hand-edited file is detected, never misread.
func encodeChecked(header string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteByte('\n')
	b.Write(body)
	sum := crc32.ChecksumIEEE(b.Bytes())
	fmt.Fprintf(&b, "crc32 %08x\n", sum)
	return b.Bytes()
}

// decodeChecked verifies data written by encodeChecked with this header and
// returns the body.
func decodeChecked(header string, data []byte) ([]byte, error) {
	if !bytes.HasSuffix(data, []byte("\n")) {
		return nil, fmt.Errorf("truncated: no final newline in %q", truncate(data))
	}
	last := bytes.LastIndexByte(data[:len(data)-1], '\n')
	if last < 0 {
		return nil, fmt.Errorf("truncated: %q", truncate(data))
	}
	content, sumLine := data[:last+1], string(data[last+1:len(data)-1])
	if want := fmt.Sprintf("crc32 %08x", crc32.ChecksumIEEE(content)); sumLine != want {
		return nil, fmt.Errorf("checksum mismatch: file says %q, content gives %q", truncate([]byte(sumLine)), want)
	}
	head, body, ok := bytes.Cut(content, []byte("\n"))
	if !ok || string(head) != header {
		return nil, fmt.Errorf("bad header %q, want %q", truncate(head), header)
	}
	return body, nil
}

// readStateFile reads and decodes the state file at path. A missing file
// gives found == false and no error; an unreadable one an error naming what
// it is; one that decode refuses an error wrapping ErrCorrupt that names the
// file and says what to do (advice), never a silent reset.
func readStateFile[T any](path, what, advice string, decode func([]byte) (T, error)) (v T, found bool, err error) {
	data, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("leasing: read %s file: %w", what, err)
	}
	if v, err = decode(data); err != nil {
		return v, false, fmt.Errorf("%w: %s: %v (%s)", ErrCorrupt, path, err, advice)
	}
	return v, true, nil
}

// parseUintLine parses a body of exactly one line "NAME N".
func parseUintLine(body []byte, name string) (uint64, error) {
	line, ok := strings.CutSuffix(string(body), "\n")
	num, ok2 := strings.CutPrefix(line, name+" ")
	if !ok || !ok2 || strings.Contains(line, "\n") {
		return 0, fmt.Errorf("bad %s line %q", name, truncate(body))
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s: %w", name, err)
	}
	return n, nil
}
