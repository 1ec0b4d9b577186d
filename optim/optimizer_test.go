package optim_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	. "github.com/subtta/subtta/optim"
)

// optTol: optimizer steps are compared element-wise in absolute terms, as the
// fixtures README suggests (1e-6). The float64 run is held to 1e-12.
const (
	optTol32 = 1e-6
	optTol64 = 1e-12
)

// adamCase is one optimizer step checked against a fixture: parameters from
// paramFrom, state from stateFrom (empty: fresh) at step, gradient grad;
// expected parameters wantParam and, if wantState is set, moments.
type adamCase struct {
	label                      string
	paramFrom, stateFrom, grad string
	step                       int
	wantParam, wantState       string
}

func runAdamCase[T Float](t *testing.T, x *fx, cfg AdamConfig, names []string, c adamCase, tol float64) {
	t.Helper()
	opt, err := NewAdam[T](cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.stateFrom != "" {
		if err := opt.SetState(fixturefile.AdamState[T](x.File, c.stateFrom, names, c.step)); err != nil {
			t.Fatal(err)
		}
	}
	params := make([]Param[T], len(names))
	for i, p := range names {
		params[i] = Param[T]{Name: p, Value: load[T](x, c.paramFrom+p), Grad: load[T](x, c.grad+p)}
	}
	stepped, err := opt.Step(params)
	if err != nil || !stepped {
		t.Fatalf("%s: step: stepped=%v err=%v", c.label, stepped, err)
	}
	var worstP, worstS float64
	st := opt.State()
	for _, p := range params {
		abs, _ := fixturefile.ErrStats(toF64(p.Value), x.Vec(c.wantParam+p.Name))
		worstP = math.Max(worstP, abs)
		if abs > tol {
			t.Errorf("%s: %s: param error %.3g > %.0e", c.label, p.Name, abs, tol)
		}
		if c.wantState != "" {
			for _, b := range []string{BufExpAvg, BufExpAvgSq} {
				abs, _ := fixturefile.ErrStats(toF64(st[p.Name].Buffers[b]), x.Vec(c.wantState+b+"."+p.Name))
				worstS = math.Max(worstS, abs)
				if abs > tol {
					t.Errorf("%s: %s %s error %.3g > %.0e", c.label, b, p.Name, abs, tol)
				}
			}
			if st[p.Name].Step != c.step+1 {
				t.Errorf("%s: %s: step %d, want %d", c.label, p.Name, st[p.Name].Step, c.step+1)
			}
		}
	}
	t.Logf("%-28s worst abs error: params %.3g, moments %.3g (tol %.0e)", c.label, worstP, worstS, tol)
}

// TestSubTTAOptimizerSteps checks stages A-opt and B-opt of every batch:
// AdamW from the stored state and gradient gives the stored parameters.
func TestSubTTAOptimizerSteps(t *testing.T) {
	var cfgJSON struct {
		Config fixturefile.Optimizer `json:"config"`
	}
	fixturefile.ReadJSON(t, "fixtures/subtta.json", &cfgJSON)
	for _, file := range []string{"fixtures/subtta.safetensors", "fixtures/subtta_fp64.safetensors"} {
		t.Run(file, func(t *testing.T) {
			x := openFixture(t, file)
			cfg := cfgJSON.Config.Adam(t)
			names := x.ParamNames()
			for k := range x.Batches("b", "F1") {
				b := fmt.Sprintf("b%d.", k)
				a := adamCase{label: b + "A-opt", paramFrom: "init.param.", grad: b + "align.grad.", step: 2 * k,
					wantParam: b + "align.param.", wantState: b + "align.adam."}
				if k > 0 {
					prev := fmt.Sprintf("b%d.", k-1)
					a.paramFrom, a.stateFrom = prev+"mint.param.", prev+"mint.adam."
				}
				bb := adamCase{label: b + "B-opt", paramFrom: b + "align.param.", stateFrom: b + "align.adam.",
					grad: b + "mint.grad.", step: 2*k + 1, wantParam: b + "mint.param.", wantState: b + "mint.adam."}
				for _, c := range []adamCase{a, bb} {
					if strings.Contains(file, "fp64") {
						runAdamCase[float64](t, x, cfg, names, c, optTol64)
					} else {
						runAdamCase[float32](t, x, cfg, names, c, optTol32)
					}
				}
			}
		})
	}
}

// TestBaselineOptimizerSteps checks TENT's Adam and BATCLIP's AdamW chains,
// and MINT's fresh Adam (L2 weight decay) step with its aggregated gradient.
func TestBaselineOptimizerSteps(t *testing.T) {
	var js struct {
		Config map[string]fixturefile.Optimizer `json:"config"`
	}
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &js)
	x := openFixture(t, "fixtures/baselines.safetensors")
	names := x.ParamNames()
	for _, m := range []string{"tent", "batclip"} {
		cfg := js.Config[m].Adam(t)
		for k := range x.Batches(m+".b", "F") {
			b := fmt.Sprintf("%s.b%d.", m, k)
			c := adamCase{label: b + "step", paramFrom: "init.param.", grad: b + "grad.", step: k,
				wantParam: b + "param.", wantState: b + "adam."}
			if k > 0 {
				prev := fmt.Sprintf("%s.b%d.", m, k-1)
				c.paramFrom, c.stateFrom = prev+"param.", prev+"adam."
			}
			runAdamCase[float32](t, x, cfg, names, c, optTol32)
		}
	}

	// MINT: the running mean of the batch gradients, then one fresh Adam step
	// from the source parameters.
	cfg := js.Config["mint"].Adam(t)
	if cfg.Decoupled || cfg.WeightDecay == 0 {
		t.Fatalf("mint optimizer config %+v: want Adam with L2 weight decay", cfg)
	}
	var agg GradMean
	for k := range x.Batches("mint.b", "pre_F") {
		b := fmt.Sprintf("mint.b%d.", k)
		params := make([]Param[float32], len(names))
		for i, p := range names {
			params[i] = Param[float32]{Name: p, Value: load[float32](x, "init.param."+p), Grad: load[float32](x, b+"batch_grad."+p)}
		}
		if err := agg.Add(params); err != nil {
			t.Fatal(err)
		}
		for _, p := range names {
			// The running mean of k fp32 gradients (float64 here): rounding only.
			fixture.CheckRelErr(t, b+"agg_grad."+p, agg.Mean(p), x.Vec(b+"agg_grad."+p), 1e-6)
		}
		runAdamCase[float32](t, x, cfg, names, adamCase{label: b + "step", paramFrom: "init.param.",
			grad: b + "agg_grad.", wantParam: b + "param."}, optTol32)
	}
}

// TestSGD checks torch.optim.SGD's update rules on hand-computed values.
func TestSGD(t *testing.T) {
	tests := []struct {
		name string
		cfg  SGDConfig
		want [3]float64 // parameter after each of three steps
	}{
		// Gradient g = p + 1 (so it changes with p); p0 = 1.
		// plain: p ← p − 0.1(p+1): 1 → 0.8 → 0.62 → 0.458.
		{"plain", SGDConfig{LR: 0.1}, [3]float64{0.8, 0.62, 0.458}},
		// wd 0.5: g = 1.5p + 1: 1 → 0.75 → 0.5375 → 0.356875.
		{"weight-decay", SGDConfig{LR: 0.1, WeightDecay: 0.5}, [3]float64{0.75, 0.5375, 0.356875}},
		// momentum 0.9: b1 = 2 → p=0.8; g=1.8, b2 = 1.8+1.8 = 3.6 → p=0.44;
		// g=1.44, b3 = 3.24+1.44 = 4.68 → p=−0.028.
		{"momentum", SGDConfig{LR: 0.1, Momentum: 0.9}, [3]float64{0.8, 0.44, -0.028}},
		// dampening 0.5: b1 = 2 (no dampening on the first step) → 0.8;
		// b2 = 1.8 + 0.9 = 2.7 → 0.53; g = 1.53, b3 = 2.43 + 0.765 = 3.195 → 0.2105.
		{"dampening", SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.5}, [3]float64{0.8, 0.53, 0.2105}},
		// Nesterov: b1 = 2, step g + 0.9b = 3.8 → 0.62; g = 1.62, b2 = 1.8+1.62 = 3.42,
		// step 1.62 + 3.078 = 4.698 → 0.1502; g = 1.1502, b3 = 3.078+1.1502 = 4.2282,
		// step 1.1502 + 3.80538 = 4.95558 → −0.345358.
		{"nesterov", SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true}, [3]float64{0.62, 0.1502, -0.345358}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := NewSGD[float64](tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			p := Param[float64]{Name: "w", Value: []float64{1}, Grad: []float64{0}}
			for i, want := range tc.want {
				p.Grad[0] = p.Value[0] + 1
				if ok, err := opt.Step([]Param[float64]{p}); !ok || err != nil {
					t.Fatalf("step %d: %v %v", i, ok, err)
				}
				if math.Abs(p.Value[0]-want) > 1e-12 {
					t.Errorf("step %d: p = %.12g, want %.12g", i+1, p.Value[0], want)
				}
			}
		})
	}
	if _, err := NewSGD[float32](SGDConfig{LR: 0.1, Nesterov: true}); err == nil {
		t.Error("Nesterov without momentum: no error")
	}
}

// TestAdamHandComputed checks one Adam and one AdamW step against the
// closed form: on the first step the update is lr·g/(|g|+eps·…) ≈ lr·sign(g).
func TestAdamHandComputed(t *testing.T) {
	for _, decoupled := range []bool{false, true} {
		cfg := AdamConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: decoupled}
		opt, _ := NewAdam[float64](cfg)
		p := Param[float64]{Name: "w", Value: []float64{2, -3}, Grad: []float64{0.5, 0}}
		if _, err := opt.Step([]Param[float64]{p}); err != nil {
			t.Fatal(err)
		}
		for i, p0 := range []float64{2, -3} {
			g := []float64{0.5, 0}[i]
			x := p0
			if decoupled {
				x *= 1 - cfg.LR*cfg.WeightDecay
			} else {
				g += cfg.WeightDecay * p0
			}
			// m̂ = g, v̂ = g² after bias correction.
			want := x - cfg.LR*g/(math.Abs(g)+cfg.Eps)
			if math.Abs(p.Value[i]-want) > 1e-15 {
				t.Errorf("decoupled=%v elem %d: %.17g, want %.17g", decoupled, i, p.Value[i], want)
			}
		}
	}
}

func TestOptimizerSkipsNonFinite(t *testing.T) {
	opt, _ := NewAdam[float32](DefaultAdamConfig(1e-3))
	sgd, _ := NewSGD[float32](SGDConfig{LR: 0.1, Momentum: 0.9})
	for _, o := range []Optimizer[float32]{opt, sgd} {
		a := Param[float32]{Name: "a", Value: []float32{1, 2}, Grad: []float32{1, 1}}
		b := Param[float32]{Name: "b", Value: []float32{3}, Grad: []float32{float32(math.Inf(1))}}
		ok, err := o.Step([]Param[float32]{a, b})
		if ok || err != nil || o.Skipped() != 1 {
			t.Fatalf("%T: inf gradient: stepped=%v err=%v skipped=%d", o, ok, err, o.Skipped())
		}
		if a.Value[0] != 1 || b.Value[0] != 3 || len(o.State()) != 0 {
			t.Errorf("%T: skipped step changed parameters or state", o)
		}
		b.Grad[0] = float32(math.NaN())
		if ok, _ := o.Step([]Param[float32]{a, b}); ok || o.Skipped() != 2 {
			t.Errorf("%T: NaN gradient not skipped", o)
		}
		b.Grad[0] = 1
		if ok, err := o.Step([]Param[float32]{a, b}); !ok || err != nil || a.Value[0] == 1 {
			t.Errorf("%T: finite step not taken: %v %v", o, ok, err)
		}
	}
}

func TestOptimizerBadInput(t *testing.T) {
	opt, _ := NewAdam[float32](DefaultAdamConfig(1e-3))
	cases := map[string][]Param[float32]{
		"length":    {{Name: "a", Value: []float32{1, 2}, Grad: []float32{1}}},
		"duplicate": {{Name: "a", Value: []float32{1}, Grad: []float32{1}}, {Name: "a", Value: []float32{1}, Grad: []float32{1}}},
	}
	for name, ps := range cases {
		if _, err := opt.Step(ps); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewAdam[float32](AdamConfig{LR: 1e-3, Beta1: 1, Beta2: 0.999}); err == nil {
		t.Error("beta1 = 1: no error")
	}
	bad := State[float32]{"a": {Step: 1, Buffers: map[string][]float32{BufExpAvg: {0}}}}
	if err := opt.SetState(bad); err == nil {
		t.Error("state without exp_avg_sq: no error")
	}
	// A state whose length disagrees with the parameter is caught at Step.
	good := State[float32]{"a": {Step: 1, Buffers: map[string][]float32{BufExpAvg: {0, 0}, BufExpAvgSq: {0, 0}}}}
	if err := opt.SetState(good); err != nil {
		t.Fatal(err)
	}
	if _, err := opt.Step([]Param[float32]{{Name: "a", Value: []float32{1}, Grad: []float32{1}}}); err == nil {
		t.Error("state length mismatch: no error")
	}
}

// TestOptimizerSnapshotRestore: restoring a snapshot and replaying the same
// gradients reproduces the same parameters bit for bit; nil gradients leave a
// parameter and its state alone; Reset gives a fresh optimizer.
func TestOptimizerSnapshotRestore(t *testing.T) {
	opt, _ := NewAdam[float32](AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true})
	p := []Param[float32]{
		{Name: "a", Value: []float32{1, -1, 0.5}, Grad: []float32{0.1, -0.2, 0.3}},
		{Name: "frozen", Value: []float32{7}},
	}
	opt.Step(p)
	snap := opt.State()
	start := append([]float32(nil), p[0].Value...)
	opt.Step(p)
	opt.Step(p)
	first := append([]float32(nil), p[0].Value...)
	if err := opt.SetState(snap); err != nil {
		t.Fatal(err)
	}
	copy(p[0].Value, start)
	opt.Step(p)
	opt.Step(p)
	for i := range first {
		if first[i] != p[0].Value[i] {
			t.Fatalf("replay after restore differs at %d: %v vs %v", i, first[i], p[0].Value[i])
		}
	}
	st := opt.State()
	if st["a"].Step != 3 {
		t.Errorf("step after restore+2 = %d, want 3", st["a"].Step)
	}
	if _, ok := st["frozen"]; ok || p[1].Value[0] != 7 {
		t.Error("parameter without gradient got state or moved")
	}
	// The snapshot is a deep copy: later steps did not change it.
	if snap["a"].Step != 1 {
		t.Errorf("snapshot mutated: step %d", snap["a"].Step)
	}
	opt.Reset()
	if len(opt.State()) != 0 || opt.Skipped() != 0 {
		t.Error("Reset left state behind")
	}
}

// TestGradMeanSums saves a GradMean half way, restores it into another, and
// checks that both give the same mean after the same further gradients.
func TestGradMeanSums(t *testing.T) {
	grads := [][]float32{{1, 2}, {3, -4}, {0.5, 0.25}}
	var a GradMean
	for _, g := range grads[:2] {
		if err := a.Add([]Param[float32]{{Name: "w", Value: make([]float32, 2), Grad: g}}); err != nil {
			t.Fatal(err)
		}
	}
	count, sums := a.Sums()
	sums["w"][0] = 99 // a copy: a is unchanged
	if m := a.MeanFloat64("w"); m[0] != 2 {
		t.Fatalf("changing Sums' map changed the GradMean: mean %v", m)
	}
	sums["w"][0] = 4
	var b GradMean
	if err := b.SetSums(count, sums); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*GradMean{&a, &b} {
		if err := g.Add([]Param[float32]{{Name: "w", Value: make([]float32, 2), Grad: grads[2]}}); err != nil {
			t.Fatal(err)
		}
	}
	want := []float64{4.5 / 3, -1.75 / 3}
	if ga, gb := a.MeanFloat64("w"), b.MeanFloat64("w"); !slices.Equal(ga, want) || !slices.Equal(gb, want) {
		t.Errorf("means %v and %v, want %v", ga, gb, want)
	}
	if err := b.SetSums(0, map[string][]float64{"w": {1}}); err == nil {
		t.Error("sums without any Add call accepted")
	}
}
