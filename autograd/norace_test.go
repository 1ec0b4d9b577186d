//go:build !race

package autograd

const raceDetector = false
