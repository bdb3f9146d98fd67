package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzServerFrame writes arbitrary bytes as one connection's whole input to
// a real server, then checks that the server closed that connection (no
// hang), did not crash (a panic in any server goroutine kills the test), and
// still answers a fresh client. The seed corpus in
// testdata/fuzz/FuzzServerFrame holds valid exchanges and known bad inputs.
func FuzzServerFrame(f *testing.F) {
	fb := newFakeBackend()
	path := filepath.Join(f.TempDir(), "tenure.sock")
	srv, err := Listen(ServerConfig{Path: path, Backend: fb, AgentVersion: "fuzz",
		WriteTimeout: time.Second, HandshakeTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })

	f.Fuzz(func(t *testing.T, data []byte) {
		feed(t, path, data)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := Dial(ctx, path)
		if err != nil {
			t.Fatalf("fresh Dial after fuzz input: %v", err)
		}
		defer c.Close()
		if _, err := c.Status(ctx); err != nil {
			t.Fatalf("fresh Status after fuzz input: %v", err)
		}
	})
}

// feed writes data on a new connection, half-closes it, and reads whatever
// the server answers until it closes the connection.
func feed(t *testing.T, path string, data []byte) {
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(testTimeout))
	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, nc)
		drained <- err
	}()
	// The server may close before reading everything: write errors are fine.
	if _, err := nc.Write(data); err == nil {
		_ = nc.(*net.UnixConn).CloseWrite()
	}
	if err := <-drained; errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server did not close the connection within %v", testTimeout)
	}
}
