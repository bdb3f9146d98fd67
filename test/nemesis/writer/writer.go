package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// tokenHeader carries the fencing token: the writer's on a PUT, the stored
// value's on a GET.
const tokenHeader = "Fencing-Token"

// maxValue bounds a value read back (the store's limit is 1 MiB).
const maxValue = 1 << 20

// op is one history line; the checker's Op has the same JSON.
type op struct {
	Node   string `json:"node"`
	PID    int    `json:"pid"`
	Op     string `json:"op"`
	Epoch  uint64 `json:"epoch"`
	Value  string `json:"value"`
	Invoke int64  `json:"invoke"`
	Return int64  `json:"return"`
	Result string `json:"result"`
}

// writer writes and reads one key, recording each operation.
type writer struct {
	cfg    config
	url    string
	client *http.Client
	hist   *os.File
	logger *slog.Logger
	pid    int
	seq    int
}

// writeLoop writes, reads and sleeps until ctx ends; the operation in
// flight when it ends is completed and recorded. It returns an error only
// when the history cannot be written.
func writeLoop(ctx context.Context, cfg config, logger *slog.Logger) error {
	hist, err := os.OpenFile(cfg.history, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open history: %w", err)
	}
	defer hist.Close()
	w := &writer{cfg: cfg, url: cfg.store + "/kv/" + url.PathEscape(cfg.key), hist: hist, logger: logger,
		client: &http.Client{Timeout: cfg.timeout}, pid: os.Getpid()}
	defer w.client.CloseIdleConnections()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if err := w.write(); err != nil || ctx.Err() != nil {
			return err
		}
		if err := w.read(); err != nil || ctx.Err() != nil {
			return err
		}
		timer.Reset(cfg.interval)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
	}
}

// write sends the next value with the writer's token and records it.
func (w *writer) write() error {
	w.seq++
	value := fmt.Sprintf("%s-e%d-p%d-%d", w.cfg.node, w.cfg.epoch, w.pid, w.seq)
	o := w.newOp("write", w.cfg.epoch, value)
	req, err := http.NewRequest(http.MethodPut, w.url, bytes.NewReader([]byte(value)))
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	req.Header.Set(tokenHeader, strconv.FormatUint(w.cfg.epoch, 10))
	resp, err := w.client.Do(req)
	switch {
	case err != nil:
		w.unknown(&o, err)
	case resp.StatusCode == http.StatusOK:
		w.finish(&o, "ok", resp)
	case resp.StatusCode == http.StatusConflict:
		w.finish(&o, "stale", resp)
	default:
		w.unknown(&o, fmt.Errorf("status %s: %s", resp.Status, drain(resp)))
	}
	return w.record(o)
}

// read gets the key back and records what the store returned.
func (w *writer) read() error {
	o := w.newOp("read", 0, "")
	resp, err := w.client.Get(w.url)
	switch {
	case err != nil:
		w.unknown(&o, err)
	case resp.StatusCode == http.StatusNotFound:
		w.finish(&o, "absent", resp)
	case resp.StatusCode == http.StatusOK:
		w.readValue(&o, resp)
	default:
		w.unknown(&o, fmt.Errorf("status %s: %s", resp.Status, drain(resp)))
	}
	return w.record(o)
}

// readValue fills a read from a 200 answer: the value and its token.
func (w *writer) readValue(o *op, resp *http.Response) {
	defer resp.Body.Close()
	token, err := strconv.ParseUint(resp.Header.Get(tokenHeader), 10, 64)
	if err != nil {
		w.unknown(o, fmt.Errorf("200 with a bad %s header: %w", tokenHeader, err))
		return
	}
	value, err := io.ReadAll(io.LimitReader(resp.Body, maxValue+1))
	if err != nil || len(value) > maxValue {
		w.unknown(o, fmt.Errorf("reading the value: %v (%d bytes)", err, len(value)))
		return
	}
	o.Epoch, o.Value = token, string(value)
	o.Result, o.Return = "ok", time.Now().UnixNano()
}

func (w *writer) newOp(kind string, epoch uint64, value string) op {
	return op{Node: w.cfg.node, PID: w.pid, Op: kind, Epoch: epoch, Value: value, Invoke: time.Now().UnixNano()}
}

// finish records a definite answer, once its body is read.
func (w *writer) finish(o *op, result string, resp *http.Response) {
	drain(resp)
	o.Result, o.Return = result, time.Now().UnixNano()
}

// unknown records an operation whose effect is unknown.
func (w *writer) unknown(o *op, err error) {
	o.Result, o.Return = "unknown", 0
	w.logger.Warn("outcome unknown", "op", o.Op, "value", o.Value, "err", err)
}

// record appends o to the history in one write(2).
func (w *writer) record(o op) error {
	line, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if _, err := w.hist.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// drain reads and closes a response body, returning its start.
func drain(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return string(bytes.TrimSpace(b))
}
