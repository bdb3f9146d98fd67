package rpc

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
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
	blocks := docHexBlocks(t, "../docs/PROTOCOL.md", "#### Example: a runner", "### 6.9")
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

// TestProtocolDocPythonClient runs the Python client of section 10 of
// docs/PROTOCOL.md (its class, with a driver in place of its last lines)
// against a real server: a call, an error that leaves the connection open,
// a frame over the limit (refused with seq 0, which the client must read
// as an error, not as a response out of step) and a watch. It needs
// python3 with msgpack (Debian: python3-msgpack), and is skipped without.
func TestProtocolDocPythonClient(t *testing.T) {
	python := pythonWithMsgpack(t)
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "```python\n")
	end := strings.Index(s, "\nt = Tenure()\n")
	if start < 0 || end < start {
		t.Fatal("the Python client of section 10 was not found")
	}
	script := s[start+len("```python\n"):end] + `
import sys
t = Tenure(sys.argv[1])
leader = t.call("leader")
print("leader", leader["node"], leader["epoch"])
try:
    t.call("nope")
except AgentError as e:
    print("error", e.code)
print("members", len(t.call("members")))
try:
    t.call("transfer", {"name": "x" * 70000})
except AgentError as e:
    print("error", e.code)
for ev in Tenure(sys.argv[1]).watch():
    print("event", ev["event"], ev["leader"]["node"], ev["leader"]["epoch"])
    break
`
	srv := startServer(t, newFakeBackend(), nil)
	out, err := exec.Command(python, "-c", script, srv.Path()).CombinedOutput()
	want := "leader n3 7\nerror unknown_op\nmembers 2\nerror frame_too_large\nevent leader-changed n3 7\n"
	if err != nil || string(out) != want {
		t.Fatalf("the doc's Python client: %v\n%s\nwant\n%s", err, out, want)
	}
}

// pythonWithMsgpack finds a python3 that imports msgpack, or skips.
func pythonWithMsgpack(t *testing.T) string {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import msgpack").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with msgpack (Debian: python3-msgpack)")
	return ""
}
