package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ErrStale is wrapped by the error Put returns when the store refused the
// write because it has accepted a higher fencing token: the writer is no
// longer the leader and should stop writing, not retry.
var ErrStale = errors.New("store: stale write refused")

// ErrNotFound is wrapped by the error Get returns for a key with no value.
var ErrNotFound = errors.New("store: no such key")

// maxMessage bounds how much of an error response the client reads.
const maxMessage = 4 << 10

// Put stores value at key on the store at baseURL (e.g.
// "http://127.0.0.1:8080") with the writer's fencing token. It returns an
// error wrapping ErrStale when the store answers 409. It uses
// http.DefaultClient; ctx bounds the whole call.
func Put(ctx context.Context, baseURL, key string, token uint64, value []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, keyURL(baseURL, key), bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("store: put %q: %w", key, err)
	}
	req.Header.Set(TokenHeader, strconv.FormatUint(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("store: put %q: %w", key, err)
	}
	defer resp.Body.Close()
	switch msg := readMessage(resp.Body); {
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrStale, msg)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("store: put %q: %s: %s", key, resp.Status, msg)
	}
	return nil
}

// Get returns the value at key on the store at baseURL and the fencing
// token of the write that stored it. A missing key is an error wrapping
// ErrNotFound.
func Get(ctx context.Context, baseURL, key string) (value []byte, token uint64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, keyURL(baseURL, key), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return readValue(resp, key)
	case http.StatusNotFound:
		return nil, 0, fmt.Errorf("%w: %q", ErrNotFound, key)
	default:
		return nil, 0, fmt.Errorf("store: get %q: %s: %s", key, resp.Status, readMessage(resp.Body))
	}
}

func readValue(resp *http.Response, key string) ([]byte, uint64, error) {
	token, err := strconv.ParseUint(resp.Header.Get(TokenHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: bad %s header: %w", key, TokenHeader, err)
	}
	value, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	if len(value) > MaxValueSize {
		return nil, 0, fmt.Errorf("store: get %q: value larger than %d bytes", key, MaxValueSize)
	}
	return value, token, nil
}

func keyURL(baseURL, key string) string {
	return strings.TrimSuffix(baseURL, "/") + "/kv/" + url.PathEscape(key)
}

// readMessage returns the start of a plain-text response body, trimmed.
func readMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, maxMessage))
	return strings.TrimSpace(string(b))
}
