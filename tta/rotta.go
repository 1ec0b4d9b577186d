package tta

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// RoTTAConfig configures RoTTA.
type RoTTAConfig struct {
	// Memory is the category-balanced memory; its Classes are the head's
	// (0 here: taken from the head).
	Memory feature.RoTTAMemoryConfig
	// UpdateEvery is the number of images between two updates
	// (UPDATE_FREQUENCY: 64).
	UpdateEvery int
	// Nu is the teacher's EMA rate: teacher ← (1−ν)·teacher + ν·student.
	Nu float64
	// Optimizer trains the method; a preset leaves it zero and Preset.New
	// sets it from Preset.Optimizer.
	Optimizer optim.Config
}

// rottaMethod registers RoTTA ([H] classification/methods/rotta.py and
// cfgs, BIT-DA/RoTTA; spec §7): a memory of 64 images, an update every 64
// images with Adam(1e-3), ν 1e-3, batches of 200 on CIFAR and 64 on
// ImageNet-C (SubTTA's).
var rottaMethod = Registration{
	Name:  "rotta",
	About: "a teacher's predictions, a category-balanced memory and a student trained on its strong augmentations (RoTTA)",
	// The teacher predicts, the student adapts.
	Cost: fixedCost(CostForward + CostForwardBackward),
	// Its random source: the strong augmentations of one domain follow
	// from the draws of the domains before it, as the official code's
	// global random generator does.
	Carries: func(Preset) bool { return true },
	Preset: func(p *Preset) error {
		p.Optimizer = optim.AdamL2(1e-3, 0)
		p.Config = RoTTAConfig{Memory: feature.DefaultRoTTAMemoryConfig(0), UpdateEvery: 64, Nu: 1e-3}
		return nil
	},
	Options: withOptimizer(
		intOption("memory", "images in the category-balanced memory (MEMORY_SIZE)", 1, math.MaxInt, inConfig(func(c *RoTTAConfig) *int { return &c.Memory.Capacity })),
		floatOption("lambda_t", "weight of an item's age in its score", nonNeg, inConfig(func(c *RoTTAConfig) *float64 { return &c.Memory.LambdaT })),
		floatOption("lambda_u", "weight of an item's uncertainty in its score", nonNeg, inConfig(func(c *RoTTAConfig) *float64 { return &c.Memory.LambdaU })),
		intOption("update_every", "images between two updates (UPDATE_FREQUENCY)", 1, math.MaxInt, inConfig(func(c *RoTTAConfig) *int { return &c.UpdateEvery })),
		floatOption("nu", "the teacher's EMA rate ν", unitClose, inConfig(func(c *RoTTAConfig) *float64 { return &c.Nu })),
	),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[RoTTAConfig](p)
		if err != nil {
			return nil, err
		}
		cfg.Optimizer = p.Optimizer
		return NewRoTTA(m, h.Head, cfg)
	},
}

// RoTTA is RoTTA on a CLIP model, with the visual LayerNorms as the
// student's parameters and an EMA teacher of them. Per batch the teacher
// predicts (the batch's predictions, fixed before any update); every image
// then enters the memory with the teacher's pseudo-label and entropy, and
// every UpdateEvery images the student takes one step on the memory: the
// soft cross-entropy between the teacher on the clean memory images and the
// student on one strong augmentation of them (data.StrongAugment, one draw
// for the batch), weighted by the items' age (feature.RoTTALoss), after
// which the teacher moves towards the student. Reset restores student,
// teacher, optimizer, memory and counter.
type RoTTA struct {
	base
	cfg     RoTTAConfig
	teacher [][]float64 // the teacher's LayerNorm values, in the trainer's order
	mem     *feature.RoTTAMemory[[]float32]
	seen    int
	pcg     *rand.PCG
	rng     *rand.Rand
	// augment turns a batch of n clean images in [0, 1] (CHW, size×size)
	// into their strong augmentation in [0, 1].
	augment func(batch []float32, n, size int) ([]float32, error)
}

// NewRoTTA returns RoTTA over the head (C×d, unit rows).
func NewRoTTA(m Model, head mat.Matrix, cfg RoTTAConfig) (*RoTTA, error) {
	if cfg.UpdateEvery < 1 || !(cfg.Nu >= 0 && cfg.Nu <= 1) {
		return nil, fmt.Errorf("tta: rotta: update every %d images, ν %g: want at least 1 and ν in [0, 1]", cfg.UpdateEvery, cfg.Nu)
	}
	b, err := newBase("rotta", m, head, cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	if cfg.Memory.Classes == 0 {
		cfg.Memory.Classes, _ = head.Dims()
	}
	mem, err := feature.NewRoTTAMemory[[]float32](cfg.Memory)
	if err != nil {
		return nil, fmt.Errorf("tta: rotta: %w", err)
	}
	r := &RoTTA{base: b, cfg: cfg, mem: mem, pcg: rand.NewPCG(0x526f5454, 0x41)}
	r.rng = rand.New(r.pcg)
	r.augment = func(batch []float32, n, size int) ([]float32, error) {
		return data.StrongAugment(batch, batch, n, size, r.rng)
	}
	r.own = r
	r.teacher = r.tr.values()
	return r, nil
}

// Reset restores the source weights in student and teacher, a fresh
// optimizer, and empties the memory.
func (r *RoTTA) Reset() error {
	r.reset()
	r.teacher = r.tr.values()
	r.mem.Reset()
	r.seen = 0
	return nil
}

// MarshalCarried returns the state of RoTTA's random source, which Reset
// leaves as it is: the strong augmentations of a domain follow from the
// draws of the domains before it, as those of the official code follow
// from its global random generator. An evaluation resumed or sharded
// between domains restores it with UnmarshalCarried.
func (r *RoTTA) MarshalCarried() ([]byte, error) { return r.pcg.MarshalBinary() }

// UnmarshalCarried restores what MarshalCarried returned.
func (r *RoTTA) UnmarshalCarried(p []byte) error {
	var pcg rand.PCG
	if err := pcg.UnmarshalBinary(p); err != nil {
		return fmt.Errorf("tta: rotta: carried random state: %w: %w", err, ErrStateMismatch)
	}
	*r.pcg = pcg
	return nil
}

// Step predicts the batch with the teacher, inserts its images into the
// memory and updates the student and the teacher every UpdateEvery images.
func (r *RoTTA) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	f, err := r.teacherFeatures(pixels, n)
	if err != nil {
		return nil, err
	}
	logits, preds := r.classify(f)
	labels, unc := feature.RoTTAPseudoLabels(logits)
	d.PseudoLabels = labels
	d.since("predict", t0)
	t0 = time.Now()
	per := len(pixels) / n
	for i := range n {
		if _, err := r.mem.Add(slices.Clone(pixels[i*per:(i+1)*per]), labels[i], unc[i]); err != nil {
			return nil, fmt.Errorf("tta: rotta: %w", err)
		}
		r.seen++
		if r.seen%r.cfg.UpdateEvery == 0 {
			loss, err := r.update(&d)
			if err != nil {
				return nil, err
			}
			d.Losses["rotta"] = loss
		}
	}
	d.since("adapt", t0)
	return &Result{Logits: logits, Preds: preds, Features: f, Diag: d}, nil
}

// teacherFeatures encodes n images with the teacher's LayerNorms, without
// a tape, and puts the student's back.
func (r *RoTTA) teacherFeatures(pixels []float32, n int) (*mat.Dense, error) {
	student := r.tr.values()
	r.tr.load(r.teacher)
	_, f, err := r.forward(pixels, n, false)
	r.tr.load(student)
	return f, err
}

// update takes the student's step on the memory and moves the teacher.
func (r *RoTTA) update(d *Diagnostics) (float64, error) {
	items := r.mem.Items()
	if len(items) == 0 {
		return 0, nil
	}
	per := len(items[0].Data)
	size := int(math.Round(math.Sqrt(float64(per / 3))))
	if 3*size*size != per {
		return 0, fmt.Errorf("tta: rotta: memory images of %d values are not square RGB", per)
	}
	pre, err := data.NewPreprocessor(data.PreprocessConfig{Size: size})
	if err != nil {
		return 0, fmt.Errorf("tta: rotta: %w", err)
	}
	clean := make([]float32, 0, len(items)*per)
	for _, it := range items {
		clean = append(clean, it.Data...)
	}
	teacher, err := r.teacherFeatures(clean, len(items))
	if err != nil {
		return 0, err
	}
	tlogits, _ := r.classify(teacher)
	// The strong augmentation works on [0, 1] images.
	x, err := pre.Unnormalize(nil, clean)
	if err != nil {
		return 0, fmt.Errorf("tta: rotta: %w", err)
	}
	if x, err = r.augment(x, len(items), size); err != nil {
		return 0, fmt.Errorf("tta: rotta: %w", err)
	}
	if x, err = pre.Normalize(x, x); err != nil {
		return 0, fmt.Errorf("tta: rotta: %w", err)
	}
	loss, err := r.studentStep(x, len(items), tlogits, d)
	if err != nil {
		return 0, err
	}
	for i, s := range r.tr.values() {
		if err := feature.EMAUpdate(r.teacher[i], s, 1-r.cfg.Nu); err != nil {
			return 0, fmt.Errorf("tta: rotta: %w", err)
		}
	}
	return loss, nil
}

// studentStep takes the student's step on the n augmented memory images x
// against the teacher's logits. On a device that runs Adam
// (kernel.AdamDevice) the optimizer runs there for it (lnTrainer.attach):
// the teacher's passes load the teacher's values on the host, so the
// attachment covers the student's pass and step only; the student's values
// put back after them are those the device holds, and go up no more.
func (r *RoTTA) studentStep(x []float32, n int, tlogits *mat.Dense, d *Diagnostics) (float64, error) {
	release, err := r.tr.attach()
	if err != nil {
		return 0, err
	}
	defer release()
	node, f, err := r.forward(x, n, true)
	if err != nil {
		return 0, err
	}
	res, err := feature.RoTTALoss(f, r.text, tlogits, r.scale, r.mem.Ages())
	if err != nil {
		return 0, fmt.Errorf("tta: rotta: %w", err)
	}
	if err := r.backward(node, res.DLdF); err != nil {
		return 0, err
	}
	if err := r.base.update(d); err != nil {
		return 0, err
	}
	return res.Loss, nil
}

// rottaOwn is RoTTA's own memory in a saved state.
type rottaOwn struct {
	Teacher [][]float64
	Items   []feature.RoTTAItem[[]float32]
	Seen    int
	RNG     []byte
}

func (r *RoTTA) saveOwn() ([]byte, error) {
	rng, err := r.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return gobBytes(&rottaOwn{Teacher: r.teacher, Items: r.mem.Items(), Seen: r.seen, RNG: rng})
}

func (r *RoTTA) loadOwn(p []byte) (func(), error) {
	var o rottaOwn
	if err := ungob(p, &o); err != nil {
		return nil, err
	}
	want := r.tr.values()
	if len(o.Teacher) != len(want) {
		return nil, fmt.Errorf("saved teacher of %d tensors, the student has %d", len(o.Teacher), len(want))
	}
	for i := range want {
		if len(o.Teacher[i]) != len(want[i]) {
			return nil, fmt.Errorf("saved teacher tensor %d has %d values, want %d", i, len(o.Teacher[i]), len(want[i]))
		}
	}
	check := *r.mem
	if err := check.SetItems(o.Items); err != nil {
		return nil, err
	}
	var pcg rand.PCG
	if err := pcg.UnmarshalBinary(o.RNG); err != nil {
		return nil, fmt.Errorf("saved random state: %w", err)
	}
	return func() {
		r.teacher, *r.mem, r.seen, *r.pcg = o.Teacher, check, o.Seen, pcg
	}, nil
}
