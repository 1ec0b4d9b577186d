//go:build cuda && !cgo

package gpu

const unavailable = "this binary was built with -tags cuda but without cgo (CGO_ENABLED=1 go build -tags cuda ./cmd/subtta)"
