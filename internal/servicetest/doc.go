// Package servicetest starts real services for tests (Debian's
// redis-server and haproxy, or any program) on free loopback ports, and
// stops them by their process id when the test ends.
//
// When a program is missing, a test fails under CI (CI=true), where .ci/run
// installs it, and is skipped with a one-line reason elsewhere, so that a
// clone on a machine without it still passes `go test ./...`. It builds on
// Unix only (process groups and signals), like the tests that use it.
package servicetest
