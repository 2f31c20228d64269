//go:build !race

package bridge

// raceDetector: see race_test.go.
const raceDetector = false
