// Package gencheck checks, in a package's tests, that its generated
// assembly is what its generator writes now (Check): a change to the
// generator that was not followed by `go generate`, or a hand edit of a
// generated file, fails the test instead of shipping stale code.
package gencheck
