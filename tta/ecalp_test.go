package tta

import (
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestECALPMethodFixture streams tta2's ECALP images through the method on
// the fixture model, in batches of every size from 1 up, and requires the
// official predictions; the features the model computes are compared with
// the stored ones first (the forward's fp32 tolerance, 1e-5).
func TestECALPMethodFixture(t *testing.T) {
	var js struct {
		ECALP struct {
			Config struct {
				Images     []int   `json:"images"`
				KText      int     `json:"k_text"`
				KImage     int     `json:"k_image"`
				Gamma      float64 `json:"gamma"`
				Alpha      float64 `json:"alpha"`
				Iterations int     `json:"num_iterations"`
			} `json:"config"`
		} `json:"ecalp"`
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.ECALP.Config
	cfg := feature.ECALPConfig{KText: c.KText, KImage: c.KImage, Gamma: c.Gamma, Alpha: c.Alpha, Iterations: c.Iterations}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	head, want, pred := x.Dense("ecalp.T"), x.Dense("ecalp.features"), x.Ints("ecalp.pred")
	n := len(c.Images)
	for i, img := range c.Images {
		if img != i {
			t.Skipf("tta2.json: ECALP streams images %v, not the first %d in order", c.Images, n)
		}
	}
	m := fxtmodel.TinyModel(t, false)
	one := fxtmodel.Pixels(t, 1)
	if len(one) < n {
		t.Skipf("tta_inputs holds %d images, ECALP's stream %d", len(one), n)
	}
	var px []float32
	for _, p := range one[:n] {
		px = append(px, p...)
	}
	size := len(one[0])
	for _, bs := range []int{1, 5, n} {
		e, err := NewECALP(m, head, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for start := 0; start < n; start += bs {
			k := min(bs, n-start)
			res, err := e.Step(px[start*size:(start+k)*size], k)
			if err != nil {
				t.Fatal(err)
			}
			if start == 0 && bs == n {
				f, _ := feature.NormalizeRows(res.Features)
				fxt.CompareDense(t, "ecalp.features", f, want, 1e-5, fxt.Rel)
			}
			got = append(got, res.Preds...)
		}
		fxt.CompareInts(t, "ecalp.pred", got, pred)
	}
}
