package hooks

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseHook(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Hook
	}{
		{"became-leader=systemctl start job", Hook{Name: "became-leader", Events: []string{"became-leader"}, Command: "systemctl start job"}},
		{"member-join, member-leave=echo a=b", Hook{Name: "member-join, member-leave", Events: []string{"member-join", "member-leave"}, Command: "echo a=b"}},
		{"*=logger x", Hook{Name: "*", Events: []string{"*"}, Command: "logger x"}},
	} {
		got, err := ParseHook(tc.spec)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHook(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
}

func TestParseHookErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"became-leader", "want EVENT=COMMAND"},
		{"became-leader=", "the command is empty"},
		{"became-leader=  ", "the command is empty"},
		{"=echo", `unknown event ""`},
		{"became-leader,,lost-leadership=echo", `unknown event ""`},
		{"no-leader=echo", `unknown event "no-leader"; want one of became-leader, lost-leadership, leader-changed, member-join, member-leave, member-failed, task-acquired, task-lost, or *`},
		{"became-leader,*=echo", `"*" stands alone`},
	} {
		_, err := ParseHook(tc.spec)
		if !errors.Is(err, ErrBadHook) || !strings.HasPrefix(err.Error(), "hooks: bad hook") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHook(%q) error = %v, want ErrBadHook mentioning %q", tc.spec, err, tc.want)
		}
	}
}

func TestNewRunnerNamesAndChecksHooks(t *testing.T) {
	hs, err := nameHooks([]Hook{
		{Events: []string{"*"}, Command: "a"},
		{Name: "x", Events: []string{"*"}, Command: "b"},
		{Name: "x", Events: []string{"*"}, Command: "c"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hs {
		names = append(names, h.Name)
	}
	if want := []string{"hook-1", "x", "x#2"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names = %q, want %q", names, want)
	}
	_, err = NewRunner(Config{Hooks: []Hook{{Events: []string{"*"}, Command: "a"}, {Events: []string{"nope"}, Command: "b"}}})
	if !errors.Is(err, ErrBadHook) || !strings.Contains(err.Error(), "(hook 2)") {
		t.Errorf("NewRunner error = %v, want ErrBadHook naming hook 2", err)
	}
	if _, err := NewRunner(Config{Timeout: -1}); err == nil {
		t.Error("NewRunner accepted a negative Timeout")
	}
}

func ExampleParseHook() {
	h, err := ParseHook("member-join,member-leave=/usr/local/bin/rebalance")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %q runs %s\n", h.Name, h.Events, h.Command)
	_, err = ParseHook("became-leder=echo")
	fmt.Println(err)
	// Output:
	// member-join,member-leave: ["member-join" "member-leave"] runs /usr/local/bin/rebalance
	// hooks: bad hook: unknown event "became-leder"; want one of became-leader, lost-leadership, leader-changed, member-join, member-leave, member-failed, task-acquired, task-lost, or * (in "became-leder=echo")
}
