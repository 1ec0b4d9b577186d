//go:build !cuda

package gpu_test

import (
	"strings"
	"testing"

	"github.com/subtta/subtta/gpu"
)

// TestWithoutTag: a binary built without the tag says how to build one.
func TestWithoutTag(t *testing.T) {
	ok, why := gpu.Available()
	if ok || !strings.Contains(why, "go build -tags cuda") {
		t.Errorf("Available() = %v, %q", ok, why)
	}
}
