package tta

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestBaselinesEndToEnd runs TENT, BATCLIP and MINT (SubTTA-repo variants)
// through the fp32 model over every batch of baselines.safetensors from the
// initial weights: features and logits 1e-5 relative, LayerNorm gradients
// 1e-4, parameters after each step 1e-6 absolute (README: 1.2e-7 between
// thread counts).
func TestBaselinesEndToEnd(t *testing.T) {
	var js struct {
		Config map[string]fixturefile.Optimizer `json:"config"`
	}
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &js)
	var bj fxt.BaselinesJSON
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &bj)
	x := fxt.Open(t, "fixtures/baselines.safetensors")
	head := x.Dense("T")
	for _, name := range []string{"tent", "batclip", "mint"} {
		t.Run(name, func(t *testing.T) {
			m := fxtmodel.TinyModel(t, false)
			opt := optim.Config{Adam: js.Config[name].Adam(t)}
			var meth Method
			var err error
			switch name {
			case "tent":
				meth, err = NewTENT(m, head, opt)
			case "batclip":
				meth, err = NewBATCLIP(m, head, opt)
			case "mint":
				var scale float64
				fmt.Sscanf(bj.Config.Mint.Scale, "%g", &scale)
				meth, err = NewMINT(m, head, MINTConfig{Optimizer: opt, Scale: scale, PriorN: bj.Config.Mint.PriorN})
			}
			if err != nil {
				t.Fatal(err)
			}
			var tr trainer
			switch mm := meth.(type) {
			case *TENT:
				tr = mm.tr
			case *BATCLIP:
				tr = mm.tr
			case *MINT:
				tr = mm.tr
			}
			names := tr.names()
			first := "F"
			if name == "mint" {
				first = "pre_F"
			}
			bsz, _ := x.Dense(name + ".b0." + first).Dims()
			px := fxtmodel.Pixels(t, bsz)
			for k := range x.Batches(name+".b", first) {
				b := fmt.Sprintf("%s.b%d.", name, k)
				res, err := meth.Step(px[k], bsz)
				if err != nil {
					t.Fatal(err)
				}
				if res.Diag.Steps != 1 || res.Diag.Skipped != 0 {
					t.Errorf("%s: %d steps, %d skipped", b, res.Diag.Steps, res.Diag.Skipped)
				}
				fxt.CompareDense(t, b+"logits", res.Logits, x.Dense(b+"logits"), 1e-5, fxt.Rel)
				fxt.CompareInts(t, b+"preds", res.Preds, x.Ints(b+"preds"))
				switch name {
				case "tent", "batclip":
					fxt.CompareDense(t, b+"F", res.Features, x.Dense(b+"F"), 1e-5, fxt.Rel)
					fxt.Compare(t, b+"loss", []float64{res.Diag.Losses[name]}, []float64{x.Scalar(b + "loss")}, 1e-5, fxt.Rel)
					compareParams(t, "", tr.grads(), names, x, b+"grad.", 1e-4, fxt.Rel, nil)
					compareParams(t, "", tr.values(), names, x, b+"param.", 1e-6, fxt.Abs, nil)
				case "mint":
					mm := meth.(*MINT)
					fxt.CompareInts(t, b+"pre_preds", res.Diag.PseudoLabels, x.Ints(b+"pre_preds"))
					fxt.Compare(t, b+"loss", []float64{res.Diag.Losses["mint"]}, []float64{x.Scalar(b + "loss")}, 1e-5, fxt.Rel)
					// The gradients of this batch stay on the tensors after
					// the step; the parameters are back at the source.
					compareParams(t, "", tr.grads(), names, x, b+"batch_grad.", 1e-4, fxt.Rel, nil)
					agg := make([][]float64, len(names))
					for i, p := range names {
						agg[i] = mm.agg.MeanFloat64(p)
					}
					compareParams(t, "", agg, names, x, b+"agg_grad.", 1e-4, fxt.Rel, nil)
					compareParams(t, "", tr.values(), names, x, "init.param.", 0, fxt.Abs, nil)
					fxt.CompareDense(t, b+"post_F", res.Features, x.Dense(b+"post_F"), 1e-5, fxt.Rel)
				}
			}
		})
	}
}
