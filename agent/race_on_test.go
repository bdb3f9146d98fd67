//go:build race

package agent

// raceDetector says whether the test binary was built with -race. The
// simulation runs in one goroutine, so the race detector finds nothing in
// its random schedules and only makes them slower: under -race they run a
// short form (scheduleRuns), and make test runs their full counts in a
// second go test without it.
const raceDetector = true
