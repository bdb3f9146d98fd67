package main

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent/hooks"
)

// The agent's config file (--config FILE) is TOML whose keys are the
// agent's flag names without the dashes in front:
//
//	name = "web-1"
//	join = ["10.0.0.11:7946", "10.0.0.12:7946"]
//	lease-ttl = "10s"
//	hook = ["became-leader=/usr/local/bin/promote.sh"]
//
// A flag given on the command line or through its TENURE_ variable wins
// over the file, and the file over the defaults. A key that names no flag
// is an error, so a typo never goes unnoticed. On SIGHUP the agent reads
// the file again and applies what can change while it runs (log-level and
// hook); other changes are logged as needing a restart.

// readConfigFile parses path into flag name → values as the flag's Set
// would take them (one per element of a list).
func readConfigFile(path string, flags []cli.Flag) (map[string][]string, error) {
	var raw map[string]any
	if _, err := toml.DecodeFile(path, &raw); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, f := range flags {
		known[f.Names()[0]] = true
	}
	out := map[string][]string{}
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		if !known[key] || key == "config" {
			return nil, fmt.Errorf("--config %s: %q is not a setting of tenure agent (keys are flag names, such as lease-ttl)", path, key)
		}
		vals, err := configValues(raw[key])
		if err != nil {
			return nil, fmt.Errorf("--config %s: %s: %w", path, key, err)
		}
		out[key] = vals
	}
	return out, nil
}

// configValues turns a TOML value into flag values.
func configValues(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case bool:
		return []string{strconv.FormatBool(v)}, nil
	case int64:
		return []string{strconv.FormatInt(v, 10)}, nil
	case float64:
		return []string{strconv.FormatFloat(v, 'g', -1, 64)}, nil
	case []any:
		var out []string
		for _, e := range v {
			s, err := configValues(e)
			if err != nil || len(s) != 1 {
				return nil, fmt.Errorf("a list may hold only strings, numbers and booleans")
			}
			out = append(out, s[0])
		}
		return out, nil
	case time.Time:
		return nil, fmt.Errorf("a date is no setting; durations are strings such as \"10s\"")
	}
	return nil, fmt.Errorf("unsupported value %v (a table?)", v)
}

// applyConfigFile sets, from the --config file, every flag that the
// command line and the environment left unset.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	values, err := readConfigFile(path, c.Command.Flags)
	if err != nil {
		return err
	}
	outside := map[string]bool{}
	for _, f := range c.Command.Flags {
		outside[f.Names()[0]] = c.IsSet(f.Names()[0])
	}
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	c.App.Metadata[metaConfig] = values
	c.App.Metadata[metaOutside] = outside
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if outside[name] {
			continue
		}
		for _, v := range values[name] {
			if err := c.Set(name, v); err != nil {
				return fmt.Errorf("--config %s: %s = %q: %w", path, name, v, err)
			}
		}
	}
	return nil
}

// Keys of cli.App.Metadata where applyConfigFile leaves what a reload
// needs: the file's values at start, and which flags the command line or
// the environment set.
const (
	metaConfig  = "tenure.config"
	metaOutside = "tenure.config.outside"
)

// startConfig is the config file as read at start.
func startConfig(c *cli.Context) map[string][]string {
	m, _ := c.App.Metadata[metaConfig].(map[string][]string)
	return m
}

// fromOutside reports whether the command line or the environment set
// the flag name (so the config file does not).
func fromOutside(c *cli.Context, name string) bool {
	m, _ := c.App.Metadata[metaOutside].(map[string]bool)
	return m[name]
}

// reloadable are the settings a SIGHUP applies without a restart.
var reloadable = []string{"log-level", "hook"}

// configChanges compares a config file read again with the one read at
// start: the values of the reloadable keys now, and the other keys whose
// values differ (they need a restart).
func configChanges(before, now map[string][]string) (reload map[string][]string, restart []string) {
	reload = map[string][]string{}
	for _, k := range reloadable {
		reload[k] = now[k]
	}
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(before, now))) {
		if !slices.Contains(reloadable, k) && !slices.Equal(before[k], now[k]) {
			restart = append(restart, k)
		}
	}
	return reload, restart
}

func mergeKeys(a, b map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// describeKeys lists keys for a log line.
func describeKeys(keys []string) string { return strings.Join(keys, ", ") }

// reloadConfig applies a SIGHUP: it reads the --config file again and
// applies log-level and hook unless the command line or the environment
// set them; the other settings that changed are logged as needing a
// restart. A file that no longer parses changes nothing.
func reloadConfig(c *cli.Context, a hookReloader, level *slog.LevelVar, log *slog.Logger) {
	path := c.String("config")
	if path == "" {
		log.Info("SIGHUP ignored: no --config file to reload")
		return
	}
	now, err := readConfigFile(path, c.Command.Flags)
	if err != nil {
		log.Error("config reload failed; nothing changed", "err", err)
		return
	}
	reload, restart := configChanges(startConfig(c), now)
	if !fromOutside(c, "log-level") {
		v, err := logLevel(first(reload["log-level"], "info"))
		if err != nil {
			log.Error("config reload: log-level not changed", "err", err)
		} else {
			level.Set(v.Level())
		}
	}
	if !fromOutside(c, "hook") {
		var hs hookList
		for _, h := range reload["hook"] {
			if err := hs.Set(h); err != nil {
				log.Error("config reload: hooks not changed", "err", err)
				return
			}
		}
		if err := a.ReloadHooks(hs.hooks); err != nil {
			log.Error("config reload: hooks not changed", "err", err)
		}
	}
	if len(restart) > 0 {
		log.Warn("config reload: these settings changed and need a restart", "keys", describeKeys(restart))
	}
	log.Info("config reloaded", "file", path)
}

// hookReloader is the part of *agent.Agent a reload uses.
type hookReloader interface {
	ReloadHooks([]hooks.Hook) error
}

func first(vals []string, def string) string {
	if len(vals) == 0 {
		return def
	}
	return vals[0]
}
