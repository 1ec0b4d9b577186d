//go:build race

package autograd

// raceDetector reports a build with the race detector, under which sync.Pool
// drops a random share of the buffers put back.
const raceDetector = true
