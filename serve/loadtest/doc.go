// Package loadtest is the client behind `subtta loadtest`: a bounded load
// test of a subtta server on this machine (its host must be a loopback
// address), with Sources senders each sending images to a stream of its
// own (or frozen requests), Idempotency-Key retries, and a Report that
// checks every stream was adapted on exactly once per answer.
//
// It speaks to the server over HTTP only and imports nothing of package
// serve, so that the server package holds the server alone.
package loadtest
