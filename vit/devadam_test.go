package vit

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/weights"
)

// TestDeviceAdam trains a random tower's LayerNorms through the device seam
// on kernel.Host for four steps with autograd.DeviceAdam (values,
// gradients and moments on the device) and with optim.Adam on the host
// over the same passes, and compares the values after each step bit for
// bit: a plain step; a step whose gradients hold a NaN (both skip it,
// nothing changes); a step with ln_pre frozen (its tensors have no
// gradient and do not step: the others step as one run at their own count)
// and a gradient added on the host to ln_post's β (taken into the device's
// gradient); a last step of all. Between steps a write into a γ on the
// host is uploaded at the next Attach, that tensor alone; attaching a
// parameter twice is refused.
func TestDeviceAdam(t *testing.T) {
	cfg := &weights.CLIPConfig{
		EmbedDim:     16,
		Vision:       weights.VisionConfig{Width: 24, Layers: 2, Heads: 2, MLPWidth: 48, PatchSize: 8, ImageSize: 16},
		LayerNormEps: weights.DefaultLayerNormEps,
		Activation:   "quick_gelu",
	}
	adamCfg := optim.AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true}
	type outcome struct {
		values  [][][]float32
		stepped []bool
	}
	train := func(onDevice bool) outcome {
		m, err := Random(cfg, 21, Options{})
		if err != nil {
			t.Fatal(err)
		}
		batch, size := 2, cfg.Vision.ImageSize
		rng := rand.New(rand.NewPCG(7, 8))
		_, images := randomImages(rng, batch, size)
		var ts []smat.Tensor
		for _, ln := range m.LayerNorms() {
			ts = append(ts, ln.Gamma, ln.Beta)
		}
		dev := &devicetest.TransferCounter{Device: kernel.Host}
		autograd.SetDevice(dev)
		defer autograd.SetDevice(nil)
		var da *autograd.DeviceAdam
		host, _ := optim.NewAdam[float32](adamCfg)
		if onDevice {
			if da, err = autograd.NewDeviceAdam(dev, ts); err != nil {
				t.Fatal(err)
			}
			defer da.Close()
		}
		var out outcome
		for step := range 4 {
			m.SetTrainable(true)
			if step == 2 {
				m.LNPre.SetTrainable(false)
			}
			if step == 1 {
				// A write between steps: only that tensor goes up at Attach.
				m.Blocks[0].LN1.Gamma.Data().F32()[1] += 0.25
			}
			release := func() {}
			if onDevice {
				dev.Reset()
				if release, err = da.Attach(); err != nil {
					t.Fatal(err)
				}
				if want := []int{len(ts) * cfg.Vision.Width, cfg.Vision.Width, 0, 0}[step]; dev.Up != want {
					t.Errorf("step %d: Attach uploaded %d values, want %d", step, dev.Up, want)
				}
				if _, err := da.Attach(); !errors.Is(err, autograd.ErrDeviceAdam) {
					t.Errorf("a second Attach: %v, want ErrDeviceAdam", err)
				}
			}
			f := m.Forward(images, nil)
			seed := make([]float32, batch*cfg.EmbedDim)
			for i := range seed {
				seed[i] = float32(rng.NormFloat64())
			}
			if step == 1 {
				seed[3] = float32(math.NaN())
			}
			f.AccGrad(smat.NewDense[float32](smat.WithShape(batch, cfg.EmbedDim), smat.WithBacking(seed)))
			if err := ag.Backward(f); err != nil {
				t.Fatal(err)
			}
			if step == 2 {
				extra := make([]float32, cfg.Vision.Width)
				for i := range extra {
					extra[i] = float32(i) / 8
				}
				m.LNPost.Beta.AccGrad(smat.NewDense[float32](smat.WithShape(m.LNPost.Beta.Shape()...), smat.WithBacking(extra)))
			}
			var stepped bool
			if onDevice {
				stepped, err = da.Step(adamCfg.Scalars32)
				release()
				da.ZeroGrad()
			} else {
				var ps []optim.Param[float32]
				for i, tn := range ts {
					p := optim.Param[float32]{Name: string(rune('a' + i)), Value: tn.Value().Data().F32()}
					if tn.HasGrad() {
						p.Grad = tn.Grad().Value().Data().F32()
					}
					ps = append(ps, p)
				}
				stepped, err = host.Step(ps)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, tn := range ts {
				tn.ZeroGrad()
			}
			var vals [][]float32
			for _, tn := range ts {
				vals = append(vals, slices.Clone(tn.Value().Data().F32()))
			}
			out.values = append(out.values, vals)
			out.stepped = append(out.stepped, stepped)
		}
		return out
	}
	got, want := train(true), train(false)
	if !slices.Equal(got.stepped, want.stepped) || !slices.Equal(want.stepped, []bool{true, false, true, true}) {
		t.Fatalf("steps taken: DeviceAdam %v, optim.Adam %v; want a skip at the second", got.stepped, want.stepped)
	}
	for step := range want.values {
		for i := range want.values[step] {
			for j, w := range want.values[step][i] {
				if g := got.values[step][i][j]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("step %d, tensor %d, value %d: DeviceAdam %g, optim.Adam %g", step, i, j, g, w)
				}
			}
		}
	}
	// ln_pre stood still at the third step, the others moved.
	if !slices.Equal(want.values[2][0], want.values[1][0]) || slices.Equal(want.values[2][2], want.values[1][2]) {
		t.Error("the third step: ln_pre moved or ln_1 did not")
	}
}
