package vit

import (
	"fmt"

	"github.com/nlpodyssey/spago/mat/float"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/internal/build"
	"github.com/subtta/subtta/weights"
)

// Options adjust how a tower is built.
type Options struct {
	// Float64 builds the weights as float64 (slow; for reference runs).
	Float64 bool
}

// New builds the vision tower from a state in OpenAI names (see
// weights.LoadCLIP) and its configuration. All LayerNorms start frozen.
func New(s *weights.State, cfg *weights.CLIPConfig, opt Options) (*Model, error) {
	v, n := cfg.Vision, cfg.TensorNames().Vision
	w, g := v.Width, v.Grid()
	b := &build.Builder{State: s, F64: opt.Float64, Eps: cfg.LayerNormEps}
	m := &Model{Config: v, EmbedDim: cfg.EmbedDim, graphs: &autograd.TowerGraphs{}}
	// conv1 [width, 3, P, P] is a Linear over flattened patches.
	conv := b.Weight(n.Conv, w, 3, v.PatchSize, v.PatchSize)
	if b.Err != nil {
		return nil, fmt.Errorf("vit: %w", b.Err)
	}
	m.Patch = autograd.NewLinearParams(conv, nil)
	m.Class = b.Matrix(n.Class, w)
	m.Pos = b.Matrix(n.Pos, g*g+1, w)
	m.LNPre = b.LayerNorm(n.LNPre, w)
	for _, names := range n.Blocks {
		m.Blocks = append(m.Blocks, b.Block(names, w, v.MLPWidth, v.Heads, false, cfg.Activation))
	}
	m.LNPost = b.LayerNorm(n.LNPost, w)
	if b.Err != nil {
		return nil, fmt.Errorf("vit: %w", b.Err)
	}
	m.Proj = b.Weight(n.Proj, w, cfg.EmbedDim)
	if b.Err != nil {
		return nil, fmt.Errorf("vit: %w", b.Err)
	}
	m.Params = b.Params
	m.KeepPacked(true)
	return m, nil
}

// Snapshot copies the values of every LayerNorm parameter (gamma, beta in
// LayerNorms order) so that Restore can reset the tower, as TTA does
// between domains.
func (m *Model) Snapshot() [][]float64 {
	var out [][]float64
	for _, ln := range m.LayerNorms() {
		for _, p := range ln.Parameters() {
			out = append(out, p.Data().F64())
		}
	}
	return out
}

// Restore writes back values taken by Snapshot.
func (m *Model) Restore(snap [][]float64) error {
	i := 0
	for _, ln := range m.LayerNorms() {
		for _, p := range ln.Parameters() {
			if i >= len(snap) || len(snap[i]) != p.Size() {
				return fmt.Errorf("vit: Restore: snapshot does not match the model (tensor %d)", i)
			}
			p.SetData(float.Make(snap[i]...))
			i++
		}
	}
	if i != len(snap) {
		return fmt.Errorf("vit: Restore: snapshot has %d tensors, model %d", len(snap), i)
	}
	return nil
}
