package tta

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestMEMOFixture replays tta2's MEMO run on the fixture model: per image,
// from the source weights, the stored AugMix views (the official ones,
// rounded to uint8 as the fixture stores them) after the base view, one
// SGD step with Nesterov momentum on their marginal entropy. It compares
// the loss and the base view's logits after the step (the forward's
// 1e-5 relative), the visual LayerNorms' gradients (1e-4 relative: the
// backward through the tower in float32) and their values after the step
// (1e-5 relative).
func TestMEMOFixture(t *testing.T) {
	var js struct {
		MEMO struct {
			Config struct {
				Images   []int   `json:"images"`
				V        int     `json:"V"`
				Lr       float64 `json:"lr"`
				Momentum float64 `json:"momentum"`
				Nesterov bool    `json:"nesterov"`
			} `json:"config"`
		} `json:"memo"`
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.MEMO.Config
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	u8, shape, err := x.Uint8("memo.views_u8")
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 5 || shape[1] != c.V || shape[0] != len(c.Images) {
		t.Fatalf("memo.views_u8: shape %v for %d images of %d views", shape, len(c.Images), c.V)
	}
	s := shape[2]
	pre, err := data.NewPreprocessor(data.PreprocessConfig{Size: s})
	if err != nil {
		t.Fatal(err)
	}
	bases := fxtmodel.Pixels(t, 1)
	m := fxtmodel.TinyModel(t, false)
	cfg := MEMOConfig{Optimizer: optim.Config{SGD: &optim.SGDConfig{LR: c.Lr, Momentum: c.Momentum, Nesterov: c.Nesterov}}}
	memo, err := NewMEMO(m, x.Dense("text.T"), c.V+1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := memo.tr.names()
	var outputs []float64
	var preds []int
	for k, img := range c.Images {
		views := append([]float32(nil), bases[img]...)
		for j := range c.V {
			off := (k*c.V + j) * s * s * 3
			px, err := pre.Transform(nil, &data.RGB{W: s, H: s, Pix: u8[off : off+s*s*3]})
			if err != nil {
				t.Fatal(err)
			}
			views = append(views, px...)
		}
		res, err := memo.StepViews(views, 1, c.V+1)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, res.Logits.RawMatrix().Data...)
		preds = append(preds, res.Preds...)
		fxt.Compare(t, "memo.loss", []float64{res.Diag.Losses["memo"]}, x.Vec("memo.loss")[k:k+1], 1e-5, fxt.Rel)
		grads, values := memo.tr.grads(), memo.tr.values()
		for i, p := range names {
			fxt.Compare(t, fmt.Sprintf("memo.i%d.grad.%s", k, p), grads[i], x.Vec(fmt.Sprintf("memo.i%d.grad.%s", k, p)), 1e-4, fxt.Rel)
			fxt.Compare(t, fmt.Sprintf("memo.i%d.param.%s", k, p), values[i], x.Vec(fmt.Sprintf("memo.i%d.param.%s", k, p)), 1e-5, fxt.Rel)
		}
	}
	fxt.Compare(t, "memo.output", outputs, x.Vec("memo.output"), 1e-5, fxt.Rel)
	fxt.CompareInts(t, "memo.pred", preds, x.Ints("memo.pred"))
}
