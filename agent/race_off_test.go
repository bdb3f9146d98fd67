//go:build !race

package agent

// raceDetector says whether the test binary was built with -race (see
// race_on_test.go).
const raceDetector = false
