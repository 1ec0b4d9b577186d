package tta

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestOptionsRoundTrip sets every option of every preset to the value it
// reports: the preset must not change (each option reads and writes the
// same field), and every method has the batch size.
func TestOptionsRoundTrip(t *testing.T) {
	for _, p := range Presets() {
		opts := p.Options()
		if len(opts) == 0 || !slicesHasKey(opts, "batch_size") {
			t.Errorf("%s/%s: options %v lack batch_size", p.Dataset, p.Method, opts)
		}
		for _, o := range opts {
			q := p
			if err := q.Set(o.Key, o.Value(p)); err != nil {
				t.Errorf("%s/%s: Set(%s, %s): %v", p.Dataset, p.Method, o.Key, o.Value(p), err)
				continue
			}
			if !reflect.DeepEqual(q, p) {
				t.Errorf("%s/%s: setting %s to its own value %s changed the preset:\n%+v\n%+v", p.Dataset, p.Method, o.Key, o.Value(p), p, q)
			}
		}
	}
}

func slicesHasKey(opts []Option, key string) bool {
	for _, o := range opts {
		if o.Key == key {
			return true
		}
	}
	return false
}

// TestOptionErrors: an unknown key, a value that does not parse and one
// out of range are refused, naming the key and what it allows, and leave
// the preset as it was.
func TestOptionErrors(t *testing.T) {
	p, err := Lookup("cifar10-c", "subtta-m")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, value string
		want       error
		say        []string
	}{
		{"rnak", "8", ErrUnknownOption, []string{"subtta-m.rnak", "rank", "alpha"}},
		{"rank", "0", ErrOptionValue, []string{"subtta-m.rank=0", "an integer ≥ 1"}},
		{"rank", "eight", ErrOptionValue, []string{"not an integer"}},
		{"alpha", "1.5", ErrOptionValue, []string{"subtta-m.alpha", "[0, 1]"}},
		{"lr", "0", ErrOptionValue, []string{"subtta-m.lr", "(0, ∞)"}},
		{"align", "maybe", ErrOptionValue, []string{"true or false"}},
		{"prediction", "best", ErrOptionValue, []string{"third_pass, projected"}},
		{"optimizer", "lbfgs", ErrOptionValue, []string{"adam, adamw, sgd"}},
	} {
		q := p
		err := q.Set(tc.key, tc.value)
		if !errors.Is(err, tc.want) {
			t.Errorf("Set(%s, %s): err = %v, want %v", tc.key, tc.value, err, tc.want)
			continue
		}
		for _, s := range tc.say {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Set(%s, %s): %q does not say %q", tc.key, tc.value, err, s)
			}
		}
		if !reflect.DeepEqual(q, p) {
			t.Errorf("Set(%s, %s) failed but changed the preset", tc.key, tc.value)
		}
	}
	src, _ := Lookup("cifar10-c", "source")
	if err := src.Set("lr", "0.1"); !errors.Is(err, ErrUnknownOption) {
		t.Errorf("source.lr: err = %v, want ErrUnknownOption (source trains nothing)", err)
	}
}

// TestOptionsReachMethod: options change what New builds. A changed rank
// changes the shape of SubTTA's subspace; the optimizer's options reach
// the preset's optimizer; the switches reach SubTTAConfig.
func TestOptionsReachMethod(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(5, 6))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 20, m.Config.EmbedDim, 1))
	rankOf := func(p Preset) int {
		meth, err := p.New(m, Heads{Head: head})
		if err != nil {
			t.Fatal(err)
		}
		r, d := meth.(*SubTTA).Subspace().Basis.Dims()
		if d != m.Config.EmbedDim {
			t.Fatalf("basis %d×%d", r, d)
		}
		return r
	}
	p, err := Lookup("cifar100-c", "subtta-m")
	if err != nil {
		t.Fatal(err)
	}
	before := rankOf(p) // min(C−1, 64) less the dropped first component: 18
	for _, set := range [][2]string{{"rank", "5"}, {"lr", "0.02"}, {"optimizer", "adamw"}, {"weight_decay", "0.5"},
		{"align", "false"}, {"project", "false"}, {"ema", "false"}, {"soft", "0.25"}, {"prediction", "projected"},
		{"bank_size", "7"}, {"reset_covariance", "true"}, {"alpha", "0.3"}, {"batch_size", "17"}} {
		if err := p.Set(set[0], set[1]); err != nil {
			t.Fatal(err)
		}
	}
	if after := rankOf(p); after != 5 || before == 5 {
		t.Errorf("rank: %d rows before, %d after rank=5", before, after)
	}
	c := p.Config.(SubTTAConfig)
	// The optimizer is kept in the preset alone; New hands it over, and a
	// constructor given the preset's config without it refuses.
	if c.Optimizer != (optim.Config{}) || p.Optimizer.String() != "AdamW(lr=0.02, wd=0.5)" {
		t.Errorf("optimizer: preset %s, config %s", p.Optimizer, c.Optimizer)
	}
	if _, err := NewSubTTA(m, head, c); !errors.Is(err, ErrNoOptimizer) {
		t.Errorf("NewSubTTA with a preset's config: err = %v, want ErrNoOptimizer", err)
	}
	if !c.NoAlign || !c.NoProjection || !c.NoEMA || c.Soft != 0.25 || c.Prediction != PredictProjected || c.BankSize != 7 ||
		!c.ResetCovariance || c.Alpha != 0.3 || p.BatchSize != 17 {
		t.Errorf("config %+v, batch %d", c, p.BatchSize)
	}
	if got := p.OptionValues(); got["rank"] != "5" || got["ema"] != "false" || got["optimizer"] != "adamw" || got["lr"] != "0.02" {
		t.Errorf("OptionValues: %v", got)
	}

	// SGD's momentum applies to SGD only; optimizer=sgd keeps the learning
	// rate. TENT keeps no copy of its optimizer.
	tent, _ := Lookup("cifar10-c", "tent")
	if err := tent.Set("momentum", "0.9"); !errors.Is(err, ErrUnknownOption) || !strings.Contains(err.Error(), "optimizer=sgd") {
		t.Errorf("tent.momentum on Adam: err = %v", err)
	}
	for _, kv := range [][2]string{{"optimizer", "sgd"}, {"momentum", "0.9"}} {
		if err := tent.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := tent.Optimizer.String(); got != "SGD(lr=0.001, momentum=0.9, nesterov=false, wd=0)" {
		t.Errorf("tent after momentum=0.9: %s", got)
	}
	// A multi-view method's share raises the fewest views it works with.
	vte, _ := Lookup("cifar10-c", "vte")
	if err := vte.Set("rho", "0.05"); err != nil {
		t.Fatal(err)
	}
	if vte.MinViews != 20 || vte.Config.(VTEConfig).Rho != 0.05 {
		t.Errorf("vte rho=0.05: min views %d, config %+v", vte.MinViews, vte.Config)
	}
	if err := vte.Set("views", "10"); err == nil {
		t.Error("vte: 10 views with ρ 0.05 accepted")
	}
}

// TestNoEMA: without the EMA, each batch is aligned with its own
// covariance whatever came before: a SubTTA whose covariance is replaced
// by noise before every batch gives the same logits, bit for bit, and the
// alignment's Σ is the batch's covariance S.
func TestNoEMA(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(7, 8))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
	p, err := Lookup("cifar10-c", "subtta-m")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Set("ema", "false"); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("alpha", "0.7"); err != nil { // ignored without the EMA
		t.Fatal(err)
	}
	px := randPixels(rng, 3*6, m.Config.Vision.ImageSize)
	n := len(px) / 3
	run := func(scramble bool) []*Result {
		snap := m.Vision.Snapshot()
		defer m.Vision.Restore(snap)
		meth, err := p.New(m, Heads{Head: head})
		if err != nil {
			t.Fatal(err)
		}
		s := meth.(*SubTTA)
		var out []*Result
		for b := range 3 {
			if scramble {
				d := m.Config.EmbedDim
				x := fxt.RandDense(rng, d+2, d, 1)
				var cov mat.SymDense
				cov.SymOuterK(1, x.T())
				if err := s.Aligner().SetCovariance(&cov); err != nil {
					t.Fatal(err)
				}
			}
			res, err := s.Step(px[b*n:(b+1)*n], 6)
			if err != nil {
				t.Fatal(err)
			}
			if a := res.Diag.Alignment; a == nil || (p.Config.(SubTTAConfig).NoEMA && !mat.Equal(a.Sigma, a.S)) {
				t.Fatalf("batch %d: no alignment, or Σ is not the batch's covariance", b)
			}
			out = append(out, res)
		}
		return out
	}
	plain, scrambled := run(false), run(true)
	for b := range plain {
		if !mat.Equal(plain[b].Logits, scrambled[b].Logits) {
			t.Errorf("batch %d: logits depend on the covariance's history", b)
		}
	}
	// With the EMA (α 0.7) the history matters: the test can tell.
	if err := p.Set("ema", "true"); err != nil {
		t.Fatal(err)
	}
	plain, scrambled = run(false), run(true)
	if mat.Equal(plain[2].Logits, scrambled[2].Logits) {
		t.Error("with the EMA the scrambled history changed nothing: the test cannot fail")
	}
}
