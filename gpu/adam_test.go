//go:build cuda && cgo

package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/optim"
)

// TestAdamMatchesCPU runs the device's Adam step (adam_step) beside
// kernel.Host's, which gives optim.Adam's float32 values bit for bit
// (optim's TestScalars32MatchesStep), for Adam, Adam with L2 weight decay
// and AdamW over four steps, the first with fresh moments (NaN in the
// moments' buffers, which it must not read), on 3,000 values of many
// magnitudes: the parameters and both moments bit for bit, a step told to
// skip (a count of non-finite values in skip) changing nothing. And NonFinite
// (non_finite, one block) counts NaN and the infinities among 70,001
// values, the block's threads each seeing some.
func TestAdamMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	ad, ok := kernel.Device(d).(kernel.AdamDevice)
	if !ok {
		t.Fatalf("%s is not a kernel.AdamDevice", d.Name())
	}
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 3000
	for _, cfg := range []optim.AdamConfig{
		optim.DefaultAdamConfig(1e-3),
		{LR: 5e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
		{LR: 5e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true},
	} {
		p := make([]float32, n)
		for i := range p {
			p[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
		nan := make([]float32, n)
		for i := range nan {
			nan[i] = float32(math.NaN())
		}
		hp, hm, hv := kernel.HostBuf(append([]float32(nil), p...)), kernel.HostBuf(append([]float32(nil), nan...)), kernel.HostBuf(append([]float32(nil), nan...))
		dp, dm, dv := upload(t, d, p), upload(t, d, nan), upload(t, d, nan)
		for step := 1; step <= 4; step++ {
			g := make([]float32, n)
			for i := range g {
				if i%13 != 0 {
					g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-6)))
				}
			}
			s := cfg.Scalars32(step)
			if err := kernel.Host.(kernel.AdamDevice).AdamStep(hp, kernel.HostBuf(g), hm, hv, n, s, nil); err != nil {
				t.Fatal(err)
			}
			var skip kernel.Buf // none, or a zero count
			if step%2 == 0 {
				skip = upload(t, d, []float32{0})
			}
			dg := upload(t, d, g)
			if err := ad.AdamStep(dp, dg, dm, dv, n, s, skip); err != nil {
				t.Fatal(err)
			}
			// A count of non-finite values: nothing changes.
			if err := ad.AdamStep(dp, dg, dm, dv, n, cfg.Scalars32(step+1), upload(t, d, []float32{2})); err != nil {
				t.Fatal(err)
			}
			for name, pair := range map[string]struct {
				dev  kernel.Buf
				host []float32
			}{"value": {dp, hp}, "exp_avg": {dm, hm}, "exp_avg_sq": {dv, hv}} {
				got := download(t, d, pair.dev, n)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(pair.host[i]) {
						t.Fatalf("%+v step %d %s[%d]: device %g, host %g", cfg, step, name, i, got[i], pair.host[i])
					}
				}
			}
		}
	}
	x := make([]float32, 70001)
	want := 0
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		switch i % 997 {
		case 3:
			x[i], want = float32(math.NaN()), want+1
		case 500:
			x[i], want = float32(math.Inf(1)), want+1
		case 996:
			x[i], want = float32(math.Inf(-1)), want+1
		case 7:
			x[i] = math.MaxFloat32
		}
	}
	flag := upload(t, d, []float32{-1})
	if err := ad.NonFinite(flag, upload(t, d, x), len(x)); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, flag, 1)[0]; got != float32(want) {
		t.Errorf("NonFinite: %v, want %d", got, want)
	}
	if err := ad.NonFinite(flag, upload(t, d, []float32{1, -2, math.MaxFloat32, -math.MaxFloat32, 0}), 5); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, flag, 1)[0]; got != 0 {
		t.Errorf("NonFinite of five finite values: %v", got)
	}
}
