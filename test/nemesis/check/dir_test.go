package check

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeLines writes one JSON line per record to dir/name, then tail as is.
func writeLines[T any](t *testing.T, dir, name string, recs []T, tail string) {
	t.Helper()
	var b strings.Builder
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString(tail)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// passingDir writes a run in which h1 leads, is killed, and h2 takes over
// after the heal, each writing through its term.
func passingDir(t *testing.T) string {
	dir := t.TempDir()
	writeLines(t, dir, "journal-h1.jsonl", []JournalRecord{
		start("h1", 0), lead("h1", 1, 100, 1100), extend("h1", 1, 400, 1400),
	}, `{"t":`+strconv.FormatInt(ms(450), 10)+`,"node":"h1","ev`) // killed mid-line
	writeLines(t, dir, "journal-h2.jsonl", []JournalRecord{
		start("h2", 0), lead("h2", 3, 1500, 2500), extend("h2", 3, 1800, 2800), end("h2", 3, 2900),
	}, "")
	writeLines(t, dir, "history-h1.jsonl", []Op{
		read("h1", 0, "", 110, 111, ResultAbsent),
		write("h1", 1, "h1-e1-p1-1", 112, 113, ResultOK),
		read("h1", 1, "h1-e1-p1-1", 114, 115, ResultOK),
	}, "")
	writeLines(t, dir, "history-h2.jsonl", []Op{
		write("h2", 3, "h2-e3-p1-1", 1510, 1511, ResultOK),
		read("h2", 3, "h2-e3-p1-1", 1512, 1513, ResultOK),
	}, "")
	writeLines(t, dir, "events.jsonl", []Event{
		ev(EventKill, 500, "h1"), ev(EventHeal, 1000), ev(EventEnd, 3000),
	}, "")
	return dir
}

func TestDirPasses(t *testing.T) {
	dir := passingDir(t)
	rep, err := Dir(dir, Options{TTL: time.Second, ElectionBound: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("report fails:\n%s", rep)
	}
	var names []string
	for _, v := range rep.Verdicts {
		names = append(names, v.Name)
	}
	if got := strings.Join(names, " "); got != "I1 I2 I3 I4-linearizable I4-monotone I5 hand-over" {
		t.Fatalf("verdicts in order %q", got)
	}
	want := map[string]int{"terms": 2, "writes-ok": 2, "reads": 3, "kills": 1, "heals": 1}
	for k, n := range want {
		if rep.Counts[k] != n {
			t.Errorf("count %s = %d, want %d (all: %v)", k, rep.Counts[k], n, rep.Counts)
		}
	}
	if len(rep.Liveness) != 1 || rep.Liveness[0] != 500*time.Millisecond {
		t.Errorf("liveness %v, want [500ms]", rep.Liveness)
	}
	if s := rep.String(); !strings.Contains(s, "PASS") || !strings.Contains(s, "I4-linearizable") {
		t.Errorf("summary:\n%s", s)
	}
	checkReportJSON(t, rep, filepath.Join(dir, "report.json"))
}

func checkReportJSON(t *testing.T, rep *Report, path string) {
	t.Helper()
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got reportJSON
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.OK != rep.OK() || len(got.Verdicts) != 7 || got.LivenessNS[0] != int64(rep.Liveness[0]) || got.Counts["terms"] != 2 {
		t.Fatalf("report.json %s", data)
	}
}

func TestDirFailsAndVisualizes(t *testing.T) {
	dir := passingDir(t)
	// h1's writer outlives its lease and sees the old value after h2 wrote.
	writeLines(t, dir, "history-h1.jsonl", []Op{
		write("h1", 1, "h1-e1-p1-1", 112, 113, ResultOK),
		read("h1", 1, "h1-e1-p1-1", 1600, 1601, ResultOK),
	}, "")
	rep, err := Dir(dir, Options{TTL: time.Second, ElectionBound: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(rep.String(), "FAIL") {
		t.Fatalf("report passes:\n%s", rep)
	}
	v, _ := rep.Verdict(NameLinearizable)
	viz := filepath.Join(dir, VisualizationFile)
	if v.OK || !strings.Contains(strings.Join(v.Details, "\n"), viz) {
		t.Fatalf("verdict %+v does not name %s", v, viz)
	}
	if st, err := os.Stat(viz); err != nil || st.Size() == 0 {
		t.Fatalf("visualization: %v", err)
	}
}

func TestDirErrors(t *testing.T) {
	for name, mutate := range map[string]func(dir string){
		"malformed middle line": func(dir string) {
			writeLines(t, dir, "journal-h2.jsonl", []JournalRecord{lead("h2", 3, 1500, 2500)}, "{\"t\":1,\"no\n"+`{"t":5,"node":"h2","event":"start"}`+"\n")
		},
		"malformed last line with newline": func(dir string) {
			writeLines(t, dir, "events.jsonl", []Event{ev(EventHeal, 1000)}, "{\"t\":1,\n")
		},
		"unknown event kind": func(dir string) {
			writeLines(t, dir, "events.jsonl", []Event{ev("heall", 1000)}, "")
		},
		"node not the file's": func(dir string) {
			writeLines(t, dir, "history-h2.jsonl", []Op{write("h3", 3, "x", 1510, 1511, ResultOK)}, "")
		},
		"lead without until": func(dir string) {
			writeLines(t, dir, "journal-h2.jsonl", []JournalRecord{{T: ms(1500), Node: "h2", Event: JournalLead, Epoch: 3}}, "")
		},
		"stale read": func(dir string) {
			writeLines(t, dir, "history-h2.jsonl", []Op{read("h2", 3, "x", 1510, 1511, ResultStale)}, "")
		},
		"no events": func(dir string) { os.Remove(filepath.Join(dir, "events.jsonl")) },
		"no journals": func(dir string) {
			os.Remove(filepath.Join(dir, "journal-h1.jsonl"))
			os.Remove(filepath.Join(dir, "journal-h2.jsonl"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := passingDir(t)
			mutate(dir)
			if rep, err := Dir(dir, Options{TTL: time.Second}); err == nil {
				t.Fatalf("no error; report:\n%s", rep)
			} else {
				t.Log(err)
			}
		})
	}
	if _, err := Dir(passingDir(t), Options{}); err == nil {
		t.Fatal("no error without a TTL")
	}
}

func TestReadJournalTruncatedLastLine(t *testing.T) {
	dir := t.TempDir()
	for tail, want := range map[string]int{
		`{"t":123,"node":"h1","eve`:                                 1, // cut short: dropped
		`{"t":123,"node":"h1","event":"start","epoch":0,"until":0}`: 2, // whole but its newline: kept
		"": 1,
	} {
		writeLines(t, dir, "j.jsonl", []JournalRecord{start("h1", 0)}, tail)
		recs, err := ReadJournal(filepath.Join(dir, "j.jsonl"))
		if err != nil || len(recs) != want {
			t.Errorf("tail %q: %d records, %v; want %d", tail, len(recs), err, want)
		}
	}
}

// The checker must share no code with the agent: nothing of tenure's
// module may be imported here (but for this package, by its example).
func TestImportsNothingOfTenure(t *testing.T) {
	const self = "github.com/tenurehq/tenure/test/nemesis/check"
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, imp := range f.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if strings.HasPrefix(path, "github.com/tenurehq/tenure") && path != self {
					t.Errorf("%s imports %s", name, imp.Path.Value)
				}
			}
		}
	}
}

// TestDirUndoesAForwardClockStep: the wall clock jumps 10 s ahead at 600
// ms while h1 leads; its renewal at 700 ms and its write at 650 ms are
// stamped 10 s late. Read as stamped, h1 wrote 9.25 s after its lease and
// no one held one for 9.3 s; with the step recorded, Load moves the later
// stamps back and the run passes.
func TestDirUndoesAForwardClockStep(t *testing.T) {
	const jump = 10_000 // ms
	dirWith := func(events []Event) string {
		dir := t.TempDir()
		writeLines(t, dir, "journal-h1.jsonl", []JournalRecord{
			start("h1", 0), lead("h1", 1, 100, 1100), extend("h1", 1, 400, 1400),
			extend("h1", 1, 700+jump, 1700+jump), end("h1", 1, 900+jump),
		}, "")
		writeLines(t, dir, "history-h1.jsonl", []Op{
			write("h1", 1, "h1-e1-p1-1", 500, 501, ResultOK),
			write("h1", 1, "h1-e1-p1-2", 650+jump, 651+jump, ResultOK),
			read("h1", 1, "h1-e1-p1-2", 652+jump, 653+jump, ResultOK),
		}, "")
		writeLines(t, dir, "events.jsonl", events, "")
		return dir
	}
	opt := Options{TTL: time.Second, ElectionBound: time.Second}
	endEv := ev(EventEnd, 1000+jump)
	rep, err := Dir(dirWith([]Event{endEv}), opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatalf("the stamps as taken pass; the test shows nothing:\n%s", rep)
	}

	step := Event{T: ms(620 + jump), Kind: EventClockStep, Step: jump * int64(time.Millisecond), Detail: "the wall clock stepped +10s"}
	dir := dirWith([]Event{step, endEv})
	rep, err = Dir(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("with the step recorded, the report fails:\n%s", rep)
	}
	if rep.Counts["clock-steps"] != 1 || len(rep.Stalls) != 1 || !strings.Contains(rep.String(), "clock step: the wall clock stepped +10s, at") {
		t.Errorf("the step is not reported: counts %v\n%s", rep.Counts, rep)
	}
	run, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := run.History[1].Invoke; got != ms(650) {
		t.Errorf("write after the step invoked at %v, want %v", time.Duration(got-base), 650*time.Millisecond)
	}
	if got := run.Journal[3]; got.T != ms(700) || got.Until != ms(1700) {
		t.Errorf("renewal after the step at %v until %v, want 700ms until 1.7s", time.Duration(got.T-base), time.Duration(got.Until-base))
	}
	if got := run.Journal[2]; got.T != ms(400) || got.Until != ms(1400) {
		t.Errorf("renewal before the step moved: at %v until %v", time.Duration(got.T-base), time.Duration(got.Until-base))
	}
}
