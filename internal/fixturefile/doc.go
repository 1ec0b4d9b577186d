// Package fixturefile reads the shared reference tensors in tests: a
// safetensors fixture whose readers fail the test on any error, and the
// error measures the fixture comparisons use. It is apart from package
// fixture because it needs package weights, whose own tests need fixture.
package fixturefile
