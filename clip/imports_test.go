package clip

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoAdaptationBelow: the model does not depend on the adaptation
// code above it (package tta and its subpackages); its scorer is
// package zeroshot's, below both.
func TestNoAdaptationBelow(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/subtta/subtta/tta" || strings.HasPrefix(p, "github.com/subtta/subtta/tta/") ||
			p == "github.com/subtta/subtta/eval" || p == "github.com/subtta/subtta/serve" {
			t.Errorf("clip depends on %s, a package above it", p)
		}
	}
}
