package optim_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	. "github.com/subtta/subtta/optim"
)

// TestScalars32MatchesStep runs kernel.AdamStep (and kernel.Host's, the
// reference of a device's AdamStep) with Scalars32 beside Adam[float32].Step
// for five steps of Adam, Adam with L2 weight decay and AdamW, on values of
// many magnitudes with exact zeros in the gradient: the parameters and
// both moments agree bit for bit at every step.
func TestScalars32MatchesStep(t *testing.T) {
	for _, cfg := range []AdamConfig{
		DefaultAdamConfig(1e-3),
		{LR: 5e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
		{LR: 5e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true},
		{LR: 0.1, Beta1: 0.5, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.3, Decoupled: true},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 1000
		val := make([]float32, n)
		for i := range val {
			val[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
		ref, err := NewAdam[float32](cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), val...)
		p := kernel.HostBuf(append([]float32(nil), val...))
		m, v := make(kernel.HostBuf, n), make(kernel.HostBuf, n)
		for i := range m { // Fresh must not read the moments
			m[i], v[i] = float32(math.NaN()), float32(math.NaN())
		}
		dev := kernel.Host.(kernel.AdamDevice)
		for step := 1; step <= 5; step++ {
			g := make([]float32, n)
			for i := range g {
				if i%17 != 0 {
					g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-6)))
				}
			}
			if _, err := ref.Step([]Param[float32]{{Name: "p", Value: want, Grad: g}}); err != nil {
				t.Fatal(err)
			}
			if err := dev.AdamStep(p, kernel.HostBuf(g), m, v, n, cfg.Scalars32(step), kernel.HostBuf{0}); err != nil {
				t.Fatal(err)
			}
			st := ref.State()["p"]
			for name, pair := range map[string][2][]float32{"value": {p, want}, "exp_avg": {m, st.Buffers[BufExpAvg]}, "exp_avg_sq": {v, st.Buffers[BufExpAvgSq]}} {
				for i := range pair[0] {
					if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
						t.Fatalf("%+v, step %d, %s %d: AdamStep %g, Adam.Step %g", cfg, step, name, i, pair[0][i], pair[1][i])
					}
				}
			}
		}
	}
	// NonFinite counts NaN and both infinities, not the largest finite.
	flag := make(kernel.HostBuf, 1)
	x := kernel.HostBuf{1, float32(math.NaN()), math.MaxFloat32, float32(math.Inf(-1)), float32(math.Inf(1)), 0}
	if err := kernel.Host.(kernel.AdamDevice).NonFinite(flag, x, len(x)); err != nil || flag[0] != 3 {
		t.Errorf("NonFinite: %v (%v), want 3", flag[0], err)
	}
}
