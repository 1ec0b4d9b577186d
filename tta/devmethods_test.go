package tta

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// devMethod is a method whose LayerNorms train with lnTrainer.step, built
// afresh (the same each time) with the trainer and its i-th step.
type devMethod struct {
	name  string
	build func(t *testing.T) (Method, trainer)
	step  func(m Method, i int) (*Result, error)
	// optSteps is the number of optimizer steps of a step; passes that
	// of backward passes (a row of zeros of a LayerNorm's size goes up
	// at each).
	optSteps, passes int
	// valueUps is the number of LayerNorm tensors uploaded in a step after
	// the first with the optimizer on the device: those the method writes
	// on the host within its step, none of the values the optimizer left.
	valueUps int
}

// devMethods are the methods that attach the device optimizer for their
// steps (all those stepping with lnTrainer.step, besides SubTTA), on
// clip-tiny with random images and heads.
func devMethods(t *testing.T) []devMethod {
	const n, classes = 4, 10
	size := fxtmodel.TinyModel(t, false).Config.Vision.ImageSize
	rng := rand.New(rand.NewPCG(41, 42))
	px := [][]float32{randPixels(rng, n, size), randPixels(rng, n, size), randPixels(rng, n, size)}
	// MEMO's views per image: not 3, whose backward passes' output
	// gradient (2 rows of the features) has a LayerNorm's size.
	const v = 4
	views := [][]float32{randPixels(rng, 2*v, size), randPixels(rng, 2*v, size), randPixels(rng, 2*v, size)}
	d := fxtmodel.TinyModel(t, false).Config.EmbedDim
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, classes, d, 1))
	adam := optim.AdamL2(1e-3, 0)
	adamW := optim.AdamW(1e-3, 0.01)
	step := func(m Method, i int) (*Result, error) { return m.Step(px[i%len(px)], n) }
	_, names := fxtmodel.TinyModel(t, false).VisionLayerNorms()
	tensors := len(names)
	const wattHeads = 2
	// wattFixture's images, whose pseudo-labels differ, with a little
	// noise that differs between the steps (WATT starts each step from the
	// source weights: the same images would give the same values).
	_, _, wpx0, _ := wattFixture(t, wattHeads)
	var wpx [][]float32
	for range 3 {
		px := slices.Clone(wpx0)
		for j := range px {
			px[j] += float32(0.05 * rng.NormFloat64())
		}
		wpx = append(wpx, px)
	}
	return []devMethod{
		{name: "tent", build: func(t *testing.T) (Method, trainer) {
			m, err := NewTENT(fxtmodel.TinyModel(t, false), head, adam)
			if err != nil {
				t.Fatal(err)
			}
			return m, m.tr
		}, step: step, optSteps: 1, passes: 1},
		{name: "batclip", build: func(t *testing.T) (Method, trainer) {
			m, err := NewBATCLIP(fxtmodel.TinyModel(t, false), head, adamW)
			if err != nil {
				t.Fatal(err)
			}
			return m, m.tr
		}, step: step, optSteps: 1, passes: 1},
		{name: "memo", build: func(t *testing.T) (Method, trainer) {
			m, err := NewMEMO(fxtmodel.TinyModel(t, false), head, v, MEMOConfig{Optimizer: adam})
			if err != nil {
				t.Fatal(err)
			}
			return m, m.tr
		}, step: func(m Method, i int) (*Result, error) {
			return m.(*MEMO).StepViews(views[i%len(views)], 2, v)
		}, optSteps: 2, passes: 2,
			// The source values restored for each image.
			valueUps: 2 * tensors},
		{name: "rotta", build: func(t *testing.T) (Method, trainer) {
			m, err := NewRoTTA(fxtmodel.TinyModel(t, false), head, RoTTAConfig{
				Memory:      feature.RoTTAMemoryConfig{Capacity: 6, LambdaT: 1, LambdaU: 1},
				UpdateEvery: 2, Nu: 0.1, Optimizer: adam,
			})
			if err != nil {
				t.Fatal(err)
			}
			return m, m.tr
		}, step: step, optSteps: 2, passes: 2,
			// The teacher's values, loaded for its passes without a tape:
			// at the step's first and after the first update's blend.
			valueUps: 2 * tensors},
		{name: "watt", build: func(t *testing.T) (Method, trainer) {
			w, _, _, _ := wattFixture(t, wattHeads)
			return w, w.tr
		}, step: func(m Method, i int) (*Result, error) {
			px := wpx[i%len(wpx)]
			return m.Step(px, len(px)/(3*size*size))
		}, optSteps: 2 * wattHeads * 2, passes: 2 * wattHeads * 2,
			// The source values at the first round, the averages at the
			// second and at the prediction's pass.
			valueUps: 3 * tensors},
	}
}

// TestMethodsOptimizerOnDevice runs each method of devMethods with the
// optimizer on the device (kernel.AdamDevice: autograd.DeviceAdam keeps the
// LayerNorm values, their gradients and the moments there) and with it on
// the host (optim.Adam, the tower on the device alike): three steps on the
// device and a fourth on the CPU (the moments brought back to the host
// optimizer), with a saved state after each. The logits, losses and saved
// states (values and moments) agree bit for bit, since the device's Adam
// gives optim.Adam's bits and the gradients are the same; a method restored
// from a state saved on the device continues as the saved one did. In the
// second step no gradient is downloaded (each optimizer step downloads the
// values and the non-finite count, one copy) and no LayerNorm value goes
// up but those the method writes on the host within its step.
func TestMethodsOptimizerOnDevice(t *testing.T) {
	for _, tc := range devMethods(t) {
		t.Run(tc.name, func(t *testing.T) {
			type record struct {
				logits, losses []float64
				state          []byte
			}
			run := func(d kernel.Device, onDevice bool, copies func(i int)) []record {
				m, tr := tc.build(t)
				autograd.SetDevice(d)
				defer autograd.SetDevice(nil)
				var recs []record
				for i := range 4 {
					if i == 3 {
						autograd.SetDevice(nil)
						onDevice = false
					}
					if copies != nil {
						copies(i)
					}
					res, err := tc.step(m, i)
					if err != nil {
						t.Fatal(err)
					}
					if dev := tr.(*lnTrainer[float32]).dev; (dev != nil) != onDevice {
						t.Fatalf("step %d: optimizer on the device %v, want %v", i, dev != nil, onDevice)
					}
					if res.Diag.Steps == 0 {
						t.Fatalf("step %d: no optimizer step", i)
					}
					st, err := m.MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					keys := slices.Sorted(maps.Keys(res.Diag.Losses))
					var losses []float64
					for _, k := range keys {
						losses = append(losses, res.Diag.Losses[k])
					}
					recs = append(recs, record{res.Logits.RawMatrix().Data, losses, st})
				}
				return recs
			}
			_, tr := tc.build(t)
			size := 0
			for _, v := range tr.values() {
				size += len(v)
			}
			w := len(tr.values()[0])
			dev := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: -1}
			var ups, downs map[int]int
			got := run(dev, true, func(i int) {
				if i == 1 {
					dev.resetCopies()
				} else if i == 2 {
					ups, downs = maps.Clone(dev.ups), maps.Clone(dev.downs)
				}
			})
			host := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: -1}
			var hostUps map[int]int
			want := run(hostAdam{host}, false, func(i int) {
				if i == 1 {
					host.resetCopies()
				} else if i == 2 {
					hostUps = maps.Clone(host.ups)
				}
			})
			for i := range want {
				sameBits(t, fmt.Sprintf("step %d logits", i), got[i].logits, want[i].logits)
				sameBits(t, fmt.Sprintf("step %d losses", i), got[i].losses, want[i].losses)
				if !bytes.Equal(got[i].state, want[i].state) {
					t.Errorf("step %d: the state saved with the optimizer on the device differs from the host optimizer's", i)
				}
			}

			// The copies of the second step.
			if downs[size+1] != tc.optSteps || downs[size] != 0 {
				t.Errorf("second step: %d downloads of the %d values and the count, %d of %d values (the gradients); want %d and 0",
					downs[size+1], size, downs[size], size, tc.optSteps)
			}
			t.Logf("second step: %d uploads of a LayerNorm's %d values on the device, %d with the host optimizer", ups[w], w, hostUps[w])
			if ups[w] != tc.passes+tc.valueUps {
				t.Errorf("second step: %d uploads of %d values, want %d (the backward passes' rows of zeros, %d LayerNorm values)",
					ups[w], w, tc.passes+tc.valueUps, tc.valueUps)
			}
			if ups[w] >= hostUps[w] {
				t.Errorf("second step: %d uploads of %d values on the device, %d with the host optimizer: want fewer", ups[w], w, hostUps[w])
			}

			// Restored from the state saved on the device after the first
			// step, a method continues as the saved one did.
			m, _ := tc.build(t)
			autograd.SetDevice(dev)
			defer autograd.SetDevice(nil)
			if err := m.UnmarshalBinary(got[0].state); err != nil {
				t.Fatal(err)
			}
			res, err := tc.step(m, 1)
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "resumed step's logits", res.Logits.RawMatrix().Data, got[1].logits)
			st, err := m.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(st, got[1].state) {
				t.Error("the resumed method's state differs from the uninterrupted one's")
			}
		})
	}
}
