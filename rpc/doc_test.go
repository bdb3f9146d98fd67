package rpc

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProtocolDocExample replays the annotated exchange of section 9 of
// docs/PROTOCOL.md against a real server, byte for byte, so the document
// cannot drift from the code.
func TestProtocolDocExample(t *testing.T) {
	blocks := docHexBlocks(t, "../docs/PROTOCOL.md", "## 9.", "## 10.")
	if len(blocks) != 5 {
		t.Fatalf("found %d hex blocks in section 9, want 5", len(blocks))
	}
	hello, reply, request, response, noLeader := blocks[0], blocks[1], blocks[2], blocks[3], blocks[4]
	fb := newFakeBackend()
	srv := startServer(t, fb, func(cfg *ServerConfig) { cfg.AgentVersion = "0.1.0" })
	r := dialRaw(t, srv.Path())

	r.sendBytes(hello)
	expectBytes(t, r, "hello reply", reply)
	r.sendBytes(request)
	expectBytes(t, r, "leader response", response)
	fb.set(func(f *fakeBackend) { f.leader = nil })
	r.sendBytes(request)
	expectBytes(t, r, "no-leader response", noLeader)
}

// TestProtocolDocRunnerExample sends the runner's frames of section 6.8 of
// docs/PROTOCOL.md (registration, stopped, running), byte for byte, in the
// order the document shows them, and checks what the server made of them.
func TestProtocolDocRunnerExample(t *testing.T) {
	blocks := docHexBlocks(t, "../docs/PROTOCOL.md", "#### Example: a runner", "## 7.")
	if len(blocks) != 3 {
		t.Fatalf("found %d hex blocks in the runner example, want 3", len(blocks))
	}
	fb := newFakeBackend()
	r := dialRaw(t, startServer(t, fb, nil).Path())
	r.hello()
	r.sendBytes(blocks[0])
	var first Response
	r.read(&first)
	if first.Seq != 1 || !first.Stream || first.Error != nil {
		t.Fatalf("first frame of the runner's watch = %+v", first)
	}
	runner := recv(t, fb.runners, "the runner's registration")
	if runner.grace != 5*time.Second {
		t.Fatalf("registered grace %v, want 5s", runner.grace)
	}
	r.sendBytes(blocks[1])
	if got := recv(t, runner.stopped, "the stopped report"); got != 7 {
		t.Fatalf("stopped report for epoch %d, want 7", got)
	}
	r.sendBytes(blocks[2])
	if got := recv(t, runner.running, "the running report"); got != [2]uint64{7, 4242} {
		t.Fatalf("running report %v, want epoch 7 and group 4242", got)
	}
}

func expectBytes(t *testing.T, r *raw, what string, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r.nc, got); err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the document:\ngot  % x\nwant % x", what, got, want)
	}
}

var hexByte = regexp.MustCompile(`^[0-9a-f]{2}$`)

// docHexBlocks returns the bytes of each fenced block between the headings
// from and to. On each line, the leading two-digit hex tokens are bytes; the
// first other token starts the annotation.
func docHexBlocks(t *testing.T, path, from, to string) [][]byte {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start, end := strings.Index(s, from), strings.Index(s, to)
	if start < 0 || end < start {
		t.Fatalf("sections %q..%q not found in %s", from, to, path)
	}
	var blocks [][]byte
	for i, part := range strings.Split(s[start:end], "```") {
		if i%2 == 0 {
			continue // outside a fence
		}
		blocks = append(blocks, hexLines(t, part))
	}
	return blocks
}

func hexLines(t *testing.T, block string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(block, "\n") {
		for _, tok := range strings.Fields(line) {
			if !hexByte.MatchString(tok) {
				break
			}
			b, err := hex.DecodeString(tok)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	return out
}
