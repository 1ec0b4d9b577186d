package pretrain

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/internal/fixture"
)

// TestTrainStepsOnDevice takes three training steps through the device
// seam (autograd.SetDevice) on kernel.Host, every block of both towers
// forward and backward on the device with all its weights trainable, and
// compares losses and weights with three steps on the CPU. The two paths
// differ in rounding only: the bias gradients are products with ones on
// the device, the activation's derivative a slope, out_proj's and c_proj's
// products are added onto the residual with their bias (x + b) + Σ rather
// than (Σ + b) + x, and the vision tower's last block runs for every token
// rather than the class tokens. Three Adam steps keep each weight within
// 1e-5 (the largest difference over the largest value; 5.8e-6 measured)
// and the losses within 1e-5 (1.4e-6 measured, at the third step). The CPU
// path is no steadier: with every other value of every parameter moved by
// one ulp before the first step, its weights move by 5.2e-6 and its third
// loss by 5.2e-6 (Adam turns rounding into steps). The key third
// of in_proj's bias is left out: it adds q·b_k to a whole row of scores,
// which the softmax ignores, so its gradient is zero but for rounding, and
// Adam turns either path's rounding into steps of the learning rate.
func TestTrainStepsOnDevice(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(12, cfg.Model.Vision.ImageSize, len(cfg.Classes), 4)
	steps := func() ([]float64, *Trainer) {
		tr, err := NewTrainer(cfg, train)
		if err != nil {
			t.Fatal(err)
		}
		var losses []float64
		for range 3 {
			res, err := tr.TrainStep()
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, res.Loss)
		}
		return losses, tr
	}
	wantLoss, want := steps()
	dev := &devicetest.BackwardCounter{Device: kernel.Host}
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	gotLoss, got := steps()
	if n, w := int(dev.LayerNormBackwards.Load()), 3*2*(cfg.Model.Vision.Layers+cfg.Model.Text.Layers); n != w {
		t.Errorf("%d LayerNorm backward passes on the device, want %d (every block of both towers, three steps)", n, w)
	}
	for i := range wantLoss {
		if math.Abs(gotLoss[i]-wantLoss[i]) > 1e-5*math.Abs(wantLoss[i]) {
			t.Errorf("step %d: loss %.9g on the device, %.9g on the CPU", i+1, gotLoss[i], wantLoss[i])
		}
	}
	worst := 0.0
	for i, p := range want.Params {
		a, b := got.Params[i].Value.Data().F32(), p.Value.Data().F32()
		if strings.HasSuffix(p.Name, "attn.in_proj_bias") {
			w := len(b) / 3
			a, b = slices.Delete(slices.Clone(a), w, 2*w), slices.Delete(slices.Clone(b), w, 2*w)
		}
		e := fixture.RelErr(a, b)
		worst = max(worst, e)
		if e > 1e-5 {
			t.Errorf("%s: relative difference %.2e after three steps on the device", p.Name, e)
		}
	}
	t.Logf("worst relative difference of a weight after three steps: %.2e", worst)
}
