package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/rpc"
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

// keysCommand manages the cluster keys on every member: install a new key,
// make it primary, then remove the old one, and the cluster never stops.
func keysCommand() *cli.Command {
	action := func(name, usage string, needsKey bool) *cli.Command {
		return &cli.Command{
			Name:      name,
			Usage:     usage,
			ArgsUsage: map[bool]string{true: "KEY", false: ""}[needsKey],
			Flags:     []cli.Flag{socketFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				key := c.Args().First()
				if needsKey {
					if c.NArg() != 1 {
						return fail(2, "tenure keys %s: give exactly one key", name)
					}
					if _, err := decodeKey(key); err != nil {
						return fail(2, "tenure keys %s: %v", name, err)
					}
				}
				return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
					info, err := cl.Keys(ctx, name, key)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, info)
					}
					printKeyring(c.App.Writer, name, info)
					return nil
				})
			},
		}
	}
	return &cli.Command{
		Name:  "keys",
		Usage: "list, install, use or remove cluster keys on every member (rotation without downtime)",
		Subcommands: []*cli.Command{
			action(rpc.KeysList, "list the keys installed across the cluster", false),
			action(rpc.KeysInstall, "install a key on every member (it is accepted, not yet used)", true),
			action(rpc.KeysUse, "make an installed key the primary on every member", true),
			action(rpc.KeysRemove, "remove a key that is no longer primary from every member", true),
		},
	}
}

func printKeyring(w io.Writer, action string, info rpc.KeyringInfo) {
	if action == rpc.KeysList {
		keys := make([]string, 0, len(info.Keys))
		for k := range info.Keys {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s  installed on %d of %d, primary on %d\n", k, info.Keys[k], info.NumNodes, info.PrimaryKeys[k])
		}
		return
	}
	fmt.Fprintf(w, "%s: done on %d of %d members\n", action, info.NumResp-info.NumErr, info.NumNodes)
}
