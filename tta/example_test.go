package tta_test

import (
	"fmt"
	"log"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
)

// zeroShot is a minimal Method: it encodes a batch without recording a
// tape and predicts with the zero-shot head. It trains nothing and keeps
// nothing between batches, so tta.Stateless gives its state half.
type zeroShot struct {
	tta.Stateless
	model tta.Model
	head  *mat.Dense
}

func (z *zeroShot) Name() string { return "zero-shot-demo" }
func (z *zeroShot) Reset() error { return nil }

func (z *zeroShot) Step(pixels []float32, n int) (*tta.Result, error) {
	z.model.SetVisionTrainable(false)
	x, err := z.model.Images(pixels, n)
	if err != nil {
		return nil, err
	}
	node := z.model.ImageFeatures(x)
	f := mat.NewDense(n, z.model.EmbedDim(), append([]float64(nil), node.Value().Data().F64()...))
	logits, preds := feature.Classify(f, z.head, z.model.InverseTemperature())
	return &tta.Result{Logits: logits, Preds: preds, Features: f}, nil
}

// A new method is a type and a Registration (with its cost per image); once registered, Lookup, Heads
// and New build it like any other (subtta eval --methods takes its name).
func Example_register() {
	err := tta.Register(tta.Registration{
		Name:   "zero-shot-demo",
		About:  "zero-shot CLIP, the smallest method",
		Preset: func(p *tta.Preset) error { p.BatchSize = 4; return nil },
		Cost:   func(tta.Preset) float64 { return tta.CostForward },
		New: func(m tta.Model, _ tta.Preset, h tta.Heads) (tta.Method, error) {
			return &zeroShot{model: m, head: h.Head}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	p, err := tta.Lookup("cifar10-c", "zero-shot-demo")
	if err != nil {
		log.Fatal(err)
	}
	model, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	heads, err := p.Heads(model, builtin.Tokenizer(), data.CIFAR10Classes)
	if err != nil {
		log.Fatal(err)
	}
	method, err := p.New(model, heads)
	if err != nil {
		log.Fatal(err)
	}

	// One batch of the built-in CIFAR-10 test images (the archive's first
	// class is airplane).
	jpegs, err := builtin.JPEGs(p.BatchSize)
	if err != nil {
		log.Fatal(err)
	}
	pre := data.NewCLIPPreprocessor(model.Config.Vision.ImageSize)
	var pixels []float32
	for i, b := range jpegs {
		img, err := data.DecodeRGB(fmt.Sprint(i), b)
		if err != nil {
			log.Fatal(err)
		}
		px, err := pre.Transform(nil, img)
		if err != nil {
			log.Fatal(err)
		}
		pixels = append(pixels, px...)
	}
	res, err := method.Step(pixels, len(jpegs))
	if err != nil {
		log.Fatal(err)
	}
	for _, y := range res.Preds {
		fmt.Println(data.CIFAR10Classes[y])
	}
	// Output:
	// airplane
	// airplane
	// airplane
	// airplane
}
