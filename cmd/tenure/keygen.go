package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/urfave/cli/v2"
)

// keyBytes is the size of a cluster key.
const keyBytes = 32

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "print a new random cluster key (base64, 32 bytes) for --encrypt",
		Action: func(c *cli.Context) error {
			key := make([]byte, keyBytes)
			if _, err := rand.Read(key); err != nil {
				return fail(1, "tenure keygen: %v", err)
			}
			fmt.Fprintln(c.App.Writer, base64.StdEncoding.EncodeToString(key))
			return nil
		},
	}
}

// decodeKey parses a base64 cluster key of 32 bytes.
func decodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("--encrypt: not base64: %w", err)
	}
	if len(key) != keyBytes {
		return nil, fmt.Errorf("--encrypt: key is %d bytes, want %d (make one with tenure keygen)", len(key), keyBytes)
	}
	return key, nil
}
