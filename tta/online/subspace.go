package online

import (
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
)

// DiagnosticSubspace is the text subspace a run's geometric diagnostics
// (RunnerConfig.Text) are measured against: the method's own when it has
// one (SubTTA), else the one SubTTA's preset for the dataset builds from the
// same head, so that every method of a run is measured alike.
func DiagnosticSubspace(m tta.Method, head mat.Matrix, dataset string) (*feature.TextSubspace, error) {
	if s, ok := m.(interface{ Subspace() *feature.TextSubspace }); ok {
		return s.Subspace(), nil
	}
	opt, err := tta.SubspaceOptions(dataset)
	if err != nil {
		return nil, err
	}
	return feature.NewTextSubspace(head, opt)
}
