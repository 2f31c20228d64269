//go:build race

package bridge

// raceDetector: the tests run under the race detector, which slows
// their own decoders some tenfold.
const raceDetector = true
