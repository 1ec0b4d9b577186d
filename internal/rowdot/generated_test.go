package rowdot

import (
	"testing"

	"github.com/subtta/subtta/internal/gencheck"
)

// TestGeneratedAssembly: the .s files are what gen_rowdot.go writes now.
func TestGeneratedAssembly(t *testing.T) { gencheck.Check(t, "gen_rowdot.go") }
