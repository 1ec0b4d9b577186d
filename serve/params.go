package serve

import (
	"slices"

	"fmt"
	"github.com/subtta/subtta/autograd/kernel"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/clip"
)

// paramView reaches the values of the vision tower's LayerNorm tensors (γ
// and β of each, in clip.Model.VisionLayerNorms order) in place, in the
// model's element type. A stream keeps its values as one float64 vector:
// float32 → float64 → float32 is exact.
type paramView struct {
	f32 [][]float32
	f64 [][]float64
	n   int
}

func newParamView(m *clip.Model) (*paramView, error) {
	v := &paramView{}
	lns, names := m.VisionLayerNorms()
	for _, ln := range lns {
		for _, t := range []smat.Matrix{ln.Gamma, ln.Beta} {
			// Data of a Dense shares its backing array when asked for its
			// own element type.
			switch d := t.(type) {
			case *smat.Dense[float32]:
				v.f32 = append(v.f32, d.Data().F32())
			case *smat.Dense[float64]:
				v.f64 = append(v.f64, d.Data().F64())
			default:
				return nil, fmt.Errorf("serve: LayerNorm tensor of type %T", t)
			}
			v.n += t.Size()
		}
	}
	if len(v.f32) > 0 && len(v.f64) > 0 || len(v.f32)+len(v.f64) != len(names) {
		return nil, fmt.Errorf("serve: %d LayerNorm tensors of mixed or unexpected types for %d names", len(v.f32)+len(v.f64), len(names))
	}
	return v, nil
}

// read appends the model's current values to dst[:0].
func (v *paramView) read(dst []float64) []float64 {
	dst = dst[:0]
	for _, t := range v.f32 {
		for _, x := range t {
			dst = append(dst, float64(x))
		}
	}
	for _, t := range v.f64 {
		dst = append(dst, t...)
	}
	return dst
}

// write sets the model's values from src (as read returned them).
func (v *paramView) write(src []float64) {
	if len(src) != v.n {
		panic(fmt.Sprintf("serve: %d LayerNorm values for %d", len(src), v.n))
	}
	for _, t := range v.f32 {
		for i := range t {
			t[i] = float32(src[i])
		}
		src = src[len(t):]
	}
	for _, t := range v.f64 {
		copy(t, src)
		src = src[len(t):]
	}
}

// frozenCopy returns a model that shares every weight of m, both towers'
// linear layers and embeddings included, but holds its own copy of the
// vision LayerNorms: the source values, never written. Frozen requests run
// on it without a lock, while streams' steps write m's LayerNorms.
func frozenCopy(m *clip.Model) (*clip.Model, error) {
	ln := func(p *autograd.LayerNormParams) *autograd.LayerNormParams {
		return &autograd.LayerNormParams{Gamma: p.Gamma.Clone(), Beta: p.Beta.Clone(), Eps: p.Eps}
	}
	v := *m.Vision
	v.LNPre, v.LNPost = ln(v.LNPre), ln(v.LNPost)
	v.Blocks = make([]*autograd.BlockParams, len(m.Vision.Blocks))
	for i, b := range m.Vision.Blocks {
		nb := *b
		nb.LN1, nb.LN2 = ln(b.LN1), ln(b.LN2)
		v.Blocks[i] = &nb
	}
	// The named parameters list the copy's own LayerNorms, so that whether
	// a pass of the copy records gradients is the copy's alone.
	copies := map[smat.Matrix]smat.Matrix{}
	for i, p := range m.Vision.LayerNorms() {
		q := v.LayerNorms()[i]
		copies[p.Gamma], copies[p.Beta] = q.Gamma, q.Beta
	}
	v.Params = slices.Clone(m.Vision.Params)
	for i, p := range v.Params {
		if q, ok := copies[p.Value]; ok {
			v.Params[i].Value = q
		}
	}
	// Reduced-precision copies of m's blocks would hold m's LayerNorms.
	if err := v.SetPrecision(kernel.FP32); err != nil {
		return nil, err
	}
	// Its own text tower too (sharing every tensor), so that its precision
	// (Config.FrozenPrecision) is not the streams' model's.
	tx := *m.Text
	if err := tx.SetPrecision(kernel.FP32); err != nil {
		return nil, err
	}
	f := *m
	f.Vision, f.Text = &v, &tx
	f.SetVisionTrainable(false)
	// Every LayerNorm tensor a Method trains must be a copy here.
	shared, _ := m.VisionLayerNorms()
	own, _ := f.VisionLayerNorms()
	seen := map[smat.Matrix]bool{}
	for _, p := range shared {
		seen[p.Gamma], seen[p.Beta] = true, true
	}
	for _, p := range own {
		if seen[p.Gamma] || seen[p.Beta] {
			return nil, fmt.Errorf("serve: the frozen copy of the model shares a LayerNorm tensor")
		}
	}
	if len(own) != len(shared) {
		return nil, fmt.Errorf("serve: the frozen copy has %d LayerNorms, the model %d", len(own), len(shared))
	}
	return &f, nil
}
