package tta_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"gonum.org/v1/gonum/mat"
)

// TestRegistrationFacts builds every registered method from every preset
// (and its episodic form) on the built-in model and checks the facts its
// registration states: Carries says what the built method's MarshalCarried
// does (a sharded evaluation splits by it), and Cost is stated, finite and
// at least one forward pass per image.
func TestRegistrationFacts(t *testing.T) {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dataset := range tta.PresetDatasets {
		classes := map[string]int{"imagenet-c": 12, "cifar10-c": 10, "cifar100-c": 100}[dataset]
		for _, name := range tta.Methods() {
			for _, episodic := range []bool{false, true} {
				p, err := tta.Lookup(dataset, name)
				if errors.Is(err, tta.ErrUnknownDataset) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if episodic {
					if p, err = p.ForEpisodic(); err != nil {
						t.Fatal(err)
					}
				}
				if c := p.Cost(); !(c >= tta.CostForward) || math.IsInf(c, 0) {
					t.Errorf("%s %s: cost %v forward passes per image, want a finite number ≥ 1", dataset, name, c)
				}
				h := randomHeads(rng, p, classes, m.Config.EmbedDim)
				h.Tokenizer = builtin.Tokenizer()
				for i := range classes {
					h.Classes = append(h.Classes, fmt.Sprintf("class %d", i))
				}
				meth, err := p.New(m, h)
				if err != nil {
					t.Fatalf("%s %s: %v", dataset, name, err)
				}
				v, err := meth.MarshalCarried()
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Carries(); got != (v != nil) {
					t.Errorf("%s %s (episodic %v): Carries %v, MarshalCarried gives %d bytes", dataset, name, episodic, got, len(v))
				}
				meth.Reset()
			}
		}
	}
}

// TestRegisterNeedsCost: a registration without a cost would leave a
// sharded evaluation to guess it.
func TestRegisterNeedsCost(t *testing.T) {
	err := tta.Register(tta.Registration{Name: "costless",
		Preset: func(*tta.Preset) error { return nil },
		New:    func(tta.Model, tta.Preset, tta.Heads) (tta.Method, error) { return nil, errors.New("unused") }})
	if err == nil {
		t.Fatal("a registration without Cost was accepted")
	}
}

func randomHeads(rng *rand.Rand, p tta.Preset, classes, dim int) tta.Heads {
	unit := func() *mat.Dense {
		v := make([]float64, classes*dim)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		d, _ := feature.NormalizeRows(mat.NewDense(classes, dim, v))
		return d
	}
	h := tta.Heads{Head: unit()}
	if p.PerTemplateHeads {
		for range p.Templates {
			h.PerTemplate = append(h.PerTemplate, unit())
		}
	}
	return h
}
