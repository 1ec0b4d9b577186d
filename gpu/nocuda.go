//go:build !cuda

package gpu

const unavailable = "this binary was built without -tags cuda (go build -tags cuda ./cmd/subtta)"
