package main

import (
	"debug/buildinfo"
	"debug/elf"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/tenurebuild"
)

// TestBinaryIsReleaseBuild checks that the binary these tests run is built
// as `make build` builds the one that ships (internal/tenurebuild): without
// cgo, with the release tags, and, on Linux, static (no ELF interpreter, so
// no C library the hosts must match).
func TestBinaryIsReleaseBuild(t *testing.T) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatalf("read the build info of %s: %v", binary, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if got := settings["CGO_ENABLED"]; got != "0" {
		t.Errorf("CGO_ENABLED = %q, want 0", got)
	}
	tags := strings.Split(settings["-tags"], ",")
	for _, want := range strings.Split(tenurebuild.Tags, ",") {
		if !slices.Contains(tags, want) {
			t.Errorf("build tags %q lack %q", settings["-tags"], want)
		}
	}
	if runtime.GOOS != "linux" {
		return
	}
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatalf("open %s: %v", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s names an ELF interpreter: it is linked dynamically", binary)
		}
	}
}
