package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"regexp"
	"strconv"
)

// MaxValueSize bounds a stored value; a larger PUT body gets 413.
const MaxValueSize = 1 << 20

// MaxKeyLen bounds a key's length.
const MaxKeyLen = 128

// errCorruptValue marks a value file that cannot be read back.
var errCorruptValue = errors.New("store: value file is corrupt")

// validKey allows letters, digits, '.', '_' and '-', starting with a letter
// or digit. Keys are used as file names as they are, so the rule is what
// keeps a key from naming anything outside the data directory: no '/', no
// "." or "..", and no leading dot (the temporary files writeFileAtomic
// leaves behind start with one). On a case-insensitive file system "A" and
// "a" share a file; this example accepts that.
var validKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func checkKey(key string) error {
	if len(key) > MaxKeyLen || !validKey.MatchString(key) {
		return fmt.Errorf("invalid key %q: keys are 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", key, MaxKeyLen)
	}
	return nil
}

const valueHeader = "tenure-kv v1"

// encodeValue renders a value file: a header, the token of the write that
// stored it, the value's length, a CRC-32 of all of those and the value, and
// then the value itself. A torn or edited file is detected, never served.
func encodeValue(token uint64, value []byte) []byte {
	head := fmt.Appendf(nil, "%s\ntoken %d\nlength %d\n", valueHeader, token, len(value))
	sum := crc32.Update(crc32.ChecksumIEEE(head), crc32.IEEETable, value)
	out := fmt.Appendf(head, "crc32 %08x\n", sum)
	return append(out, value...)
}

// decodeValue parses what encodeValue wrote.
func decodeValue(data []byte) (token uint64, value []byte, err error) {
	lines, value, err := cutLines(data, 4)
	if err != nil {
		return 0, nil, err
	}
	if lines[0] != valueHeader {
		return 0, nil, fmt.Errorf("bad header %q", lines[0])
	}
	token, err1 := parseField(lines[1], "token")
	length, err2 := parseField(lines[2], "length")
	if err := errors.Join(err1, err2); err != nil {
		return 0, nil, err
	}
	if length != uint64(len(value)) {
		return 0, nil, fmt.Errorf("file says %d bytes of value, holds %d", length, len(value))
	}
	if !bytes.Equal(encodeValue(token, value), data) {
		return 0, nil, errors.New("checksum mismatch")
	}
	return token, value, nil
}

// cutLines splits off the first n lines of data and returns them and the rest.
func cutLines(data []byte, n int) ([]string, []byte, error) {
	lines := make([]string, n)
	for i := range lines {
		line, rest, ok := bytes.Cut(data, []byte("\n"))
		if !ok {
			return nil, nil, fmt.Errorf("truncated after %d lines", i)
		}
		lines[i], data = string(line), rest
	}
	return lines, data, nil
}

func parseField(line, name string) (uint64, error) {
	num, ok := bytes.CutPrefix([]byte(line), []byte(name+" "))
	if !ok {
		return 0, fmt.Errorf("bad %s line %q", name, line)
	}
	n, err := strconv.ParseUint(string(num), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s: %w", name, err)
	}
	return n, nil
}

// maxValueFile bounds a value file: the value plus its header.
const maxValueFile = MaxValueSize + 256

// readValueFile reads and decodes the value file at path. A missing file is
// returned as an error wrapping fs.ErrNotExist.
func readValueFile(path string) (token uint64, value []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxValueFile+1))
	if err != nil {
		return 0, nil, fmt.Errorf("store: read %s: %w", path, err)
	}
	if len(data) > maxValueFile {
		return 0, nil, fmt.Errorf("%w: %s is larger than %d bytes", errCorruptValue, path, maxValueFile)
	}
	token, value, err = decodeValue(data)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s: %v", errCorruptValue, path, err)
	}
	return token, value, nil
}
