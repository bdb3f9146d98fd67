package testlog

import "testing"

func TestFieldReadsTextLogLines(t *testing.T) {
	line := `time=2026-12-04T16:53:24.904Z level=WARN msg="the natural successor cannot take the term" node=h5 successor=h4 err="x y"`
	for key, want := range map[string]string{"node": "h5", "successor": "h4", "level": "WARN", "leader": "", "cessor": ""} {
		if got := Field(line, key); got != want {
			t.Errorf("Field(%q) = %q, want %q", key, got, want)
		}
	}
}
