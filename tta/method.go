package tta

import (
	"encoding"
	"errors"
	"fmt"
	"time"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// Model is what a Method needs of a CLIP model: the vision tower on spago's
// tape, its LayerNorm parameters, the width of its features and its logit
// scale. *clip.Model implements it. Package tta does not import clip: the
// adaptation code depends on this interface only, not on the tower's
// implementation.
type Model interface {
	// Images wraps n preprocessed images (NCHW float32, n rows of 3·H·W
	// values) as the vision tower's input, in the model's precision.
	Images(pixels []float32, n int) (smat.Matrix, error)
	// ImageFeatures runs the vision tower on Images' output and returns the
	// unnormalised features (n×EmbedDim), recorded on the tape when a
	// LayerNorm requires gradients.
	ImageFeatures(images smat.Tensor) smat.Tensor
	// VisionLayerNorms returns the LayerNorms of the vision tower, the
	// parameters the Methods train, and the names of their tensors, γ then
	// β of each.
	VisionLayerNorms() ([]*autograd.LayerNormParams, []string)
	// SetVisionTrainable marks every one of those LayerNorms as requiring
	// gradients, or none.
	SetVisionTrainable(on bool)
	// Float64 reports whether the model computes in float64 rather than
	// float32.
	Float64() bool
	// EmbedDim is the width d of the features.
	EmbedDim() int
	// InverseTemperature is exp(logit_scale), the factor that turns
	// cosine similarities into logits.
	InverseTemperature() float64
}

// Method is a test-time adaptation method running on a CLIP model: it sees
// the test stream one batch at a time, may update the visual LayerNorm
// parameters, and returns its predictions.
//
// A Method owns the LayerNorm parameters of its model's vision tower: it
// takes a snapshot of them at construction (the source weights) and writes
// them in place. Run one Method per model at a time.
//
// Its whole state between two Steps saves to bytes (MarshalBinary) and
// restores into a Method built alike (same model, head, preset and
// precision) with UnmarshalBinary, which then continues exactly as the saved
// one would have: the same logits, bit for bit. UnmarshalBinary checks the
// method, precision, parameter names and sizes before it changes anything,
// leaves the Method as it was on an error, and wraps ErrStateMismatch when
// the bytes do not fit. The source LayerNorm values (what Reset restores)
// are not part of the state: they are the model's.
//
// The state that survives Reset (SubTTA's EMA covariance, which the
// official code keeps from one corruption to the next) saves and restores
// on its own with MarshalCarried and UnmarshalCarried, so that an
// evaluation interrupted between domains resumes exactly where it stopped.
type Method interface {
	// Name identifies the method in reports ("subtta-m", "tent", ...).
	Name() string
	// Reset restores the source LayerNorm weights and a fresh optimizer, and
	// clears per-domain state (MINT's class sums, the episodic feature bank).
	// SubTTA's EMA covariance survives unless its config says otherwise, as
	// in the official code.
	Reset() error
	// ResetSample restores the source LayerNorm weights and a fresh
	// optimizer but keeps every per-stream memory (the feature bank, the
	// caches, the class sums): the episodic protocol calls it before every
	// sample.
	ResetSample() error
	// Step adapts on and classifies n preprocessed images (NCHW float32, n
	// rows of 3·H·W values).
	Step(pixels []float32, n int) (*Result, error)
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
	// MarshalCarried returns the state that survives Reset, or nil when
	// there is none; UnmarshalCarried restores it.
	MarshalCarried() ([]byte, error)
	UnmarshalCarried([]byte) error
}

// Result is a Method's output for one batch.
type Result struct {
	Logits *mat.Dense // B×C, the prediction's logits
	Preds  []int      // argmax of Logits
	// Features are the unnormalised image features the prediction was made
	// from (B×d), for diagnostics.
	Features *mat.Dense
	Diag     Diagnostics
}

// Diagnostics are a Method's per-batch records.
type Diagnostics struct {
	// Losses by name: "align" (L_align), "mint", "batclip", "tent" (the
	// SubTTA second-step loss, or the baseline's loss), "entropy", "i2t",
	// "intermean" (BATCLIP's terms), "watt" and "watt_first" (WATT's mean
	// and first-step loss), "tda_entropy" (TDA's normalised entropy).
	Losses map[string]float64 `json:"losses,omitempty"`
	// Steps counts optimizer steps taken, Skipped those skipped because a
	// gradient was NaN or ±Inf (as torch's GradScaler would).
	Steps   int `json:"steps"`
	Skipped int `json:"skipped"`
	// PseudoLabels are the labels the adaptation loss used, if any.
	PseudoLabels []int `json:"pseudo_labels,omitempty"`
	// Timings are seconds spent per phase ("align", "adapt", "predict", ...).
	Timings map[string]float64 `json:"timings_s,omitempty"`
	// Alignment is SubTTA's alignment step (nil when it is off).
	Alignment *feature.Alignment `json:"-"`
}

func newDiagnostics() Diagnostics {
	return Diagnostics{Losses: map[string]float64{}, Timings: map[string]float64{}}
}

func (d *Diagnostics) since(phase string, t0 time.Time) {
	d.Timings[phase] += time.Since(t0).Seconds()
}

// trainer holds the trainable visual LayerNorm parameters of a model, their
// source values and the optimizer, in the model's element type.
type trainer interface {
	zeroGrad()
	step() (bool, error)
	// addGrads adds the current gradients to g; stepMean steps with g's mean.
	addGrads(g *optim.GradMean) error
	stepMean(g *optim.GradMean) (bool, error)
	resetOptimizer()
	restoreSource()
	// attach runs the optimizer on the current device for one step of a
	// method, where it can (devtrain.go); release ends it.
	attach() (release func(), err error)
	skipped() int
	// The state of MarshalBinary (state.go): optimizer state in float64, a
	// check that saved values fit, and their installation.
	optState() (optim.State[float64], error)
	checkState(names []string, values [][]float64, st optim.State[float64]) error
	setState(values [][]float64, st optim.State[float64]) error
	// For tests: parameter values, gradients (nil when none) and optimizer
	// state, in float64, by parameter name.
	names() []string
	values() [][]float64
	grads() [][]float64
	setValues(map[string][]float64) error
	// load overwrites the values with v (values' order and sizes).
	load(v [][]float64)
	optimizer() any
}

type lnTrainer[T float.DType] struct {
	mats   []smat.Matrix
	params []optim.Param[T]
	source [][]T
	opt    optim.Optimizer[T]
	// dev, when set, holds the values, gradients and moments on a device
	// (attach; devtrain.go): the moments there are the optimizer's state,
	// and attached says a step is running there. devSkipped counts the
	// steps it skipped.
	dev        *autograd.DeviceAdam
	attached   bool
	devSkipped int
}

func newTrainer(m Model, f64 bool, cfg optim.Config) (trainer, error) {
	if f64 {
		return newLNTrainer[float64](m, cfg)
	}
	return newLNTrainer[float32](m, cfg)
}

func newLNTrainer[T float.DType](m Model, cfg optim.Config) (*lnTrainer[T], error) {
	opt, err := optim.New[T](cfg)
	if err != nil {
		return nil, err
	}
	lns, names := m.VisionLayerNorms()
	tr := &lnTrainer[T]{opt: opt}
	for _, ln := range lns {
		tr.mats = append(tr.mats, ln.Parameters()...)
	}
	if len(names) != len(tr.mats) {
		return nil, fmt.Errorf("tta: %d LayerNorm names for %d tensors", len(names), len(tr.mats))
	}
	for i, m := range tr.mats {
		d, ok := m.(*smat.Dense[T])
		if !ok {
			return nil, fmt.Errorf("tta: LayerNorm tensor %s is %T, want %T", names[i], m, (*smat.Dense[T])(nil))
		}
		// Data of a Dense of the same element type shares its backing
		// array: the optimizer updates the model in place.
		val := float.SliceValueOf[T](d.Data())
		tr.params = append(tr.params, optim.Param[T]{Name: names[i], Value: val})
		tr.source = append(tr.source, append([]T(nil), val...))
		m.SetRequiresGrad(true)
	}
	return tr, nil
}

func (tr *lnTrainer[T]) zeroGrad() {
	for i, m := range tr.mats {
		m.ZeroGrad()
		tr.params[i].Grad = nil
	}
	if tr.dev != nil {
		tr.dev.ZeroGrad()
	}
}

// hostOptimizer brings the optimizer's state back from the device when a
// step runs on the host.
func (tr *lnTrainer[T]) hostOptimizer() error {
	switch {
	case tr.dev == nil:
		return nil
	case tr.attached:
		return fmt.Errorf("tta: a host optimizer step while the optimizer runs on %s", tr.dev.Device().Name())
	}
	return tr.toHost()
}

// collect points every Param's Grad at its tensor's accumulated gradient.
func (tr *lnTrainer[T]) collect() {
	for i, m := range tr.mats {
		tr.params[i].Grad = nil
		// Grad returns a typed nil inside the interface when there is none.
		if m.HasGrad() {
			tr.params[i].Grad = float.SliceValueOf[T](m.Grad().Value().Data())
		}
	}
}

func (tr *lnTrainer[T]) step() (bool, error) {
	if tr.attached {
		return tr.devStep()
	}
	if err := tr.hostOptimizer(); err != nil {
		return false, err
	}
	tr.collect()
	return tr.opt.Step(tr.params)
}

func (tr *lnTrainer[T]) addGrads(g *optim.GradMean) error {
	if err := tr.hostOptimizer(); err != nil {
		return err
	}
	tr.collect()
	switch p := any(tr.params).(type) {
	case []optim.Param[float32]:
		return g.Add(p)
	case []optim.Param[float64]:
		return g.AddFloat64(p)
	}
	panic("unreachable")
}

func (tr *lnTrainer[T]) stepMean(g *optim.GradMean) (bool, error) {
	if err := tr.hostOptimizer(); err != nil {
		return false, err
	}
	for i := range tr.params {
		m := g.MeanFloat64(tr.params[i].Name)
		if m == nil {
			tr.params[i].Grad = nil
			continue
		}
		gr := make([]T, len(m))
		for j, v := range m {
			gr[j] = T(v)
		}
		tr.params[i].Grad = gr
	}
	return tr.opt.Step(tr.params)
}

func (tr *lnTrainer[T]) resetOptimizer() {
	tr.opt.Reset()
	tr.devSkipped = 0
	if tr.dev != nil {
		tr.dev.Reset()
	}
}

func (tr *lnTrainer[T]) restoreSource() {
	for i, p := range tr.params {
		copy(p.Value, tr.source[i])
	}
}

func (tr *lnTrainer[T]) skipped() int { return tr.opt.Skipped() + tr.devSkipped }

func (tr *lnTrainer[T]) names() []string {
	out := make([]string, len(tr.params))
	for i, p := range tr.params {
		out[i] = p.Name
	}
	return out
}

func (tr *lnTrainer[T]) values() [][]float64 {
	out := make([][]float64, len(tr.params))
	for i, p := range tr.params {
		out[i] = float.SliceValueOf[float64](float.Make(p.Value...))
		out[i] = append([]float64(nil), out[i]...)
	}
	return out
}

func (tr *lnTrainer[T]) grads() [][]float64 {
	if tr.attached {
		gs, err := tr.dev.Grads()
		if err != nil {
			panic(err) // for tests
		}
		out := make([][]float64, len(gs))
		for i, g := range gs {
			out[i] = toT[float64](g)
		}
		return out
	}
	tr.collect()
	out := make([][]float64, len(tr.params))
	for i, p := range tr.params {
		if p.Grad != nil {
			out[i] = append([]float64(nil), float.SliceValueOf[float64](float.Make(p.Grad...))...)
		}
	}
	return out
}

func (tr *lnTrainer[T]) load(v [][]float64) {
	for i, p := range tr.params {
		for j, x := range v[i] {
			p.Value[j] = T(x)
		}
	}
}

func (tr *lnTrainer[T]) setValues(v map[string][]float64) error {
	for _, p := range tr.params {
		x, ok := v[p.Name]
		if !ok || len(x) != len(p.Value) {
			return fmt.Errorf("tta: set values: parameter %s missing or of wrong length", p.Name)
		}
		for j := range x {
			p.Value[j] = T(x[j])
		}
	}
	return nil
}

func (tr *lnTrainer[T]) optimizer() any { return tr.opt }

// base is what every Method shares: the model, the text head and the
// trainable parameters.
type base struct {
	name  string // what Name returns
	model Model
	// text is the head (C×d, unit rows) in float64.
	text  *mat.Dense
	scale float64 // exp(logit_scale)
	f64   bool
	tr    trainer
	// own, when set, saves and restores the method's own memory as part
	// of its state (MarshalBinary).
	own ownState
}

func newBase(name string, m Model, head mat.Matrix, opt optim.Config) (base, error) {
	if m == nil {
		return base{}, errors.New("tta: nil model")
	}
	c, d := head.Dims()
	if d != m.EmbedDim() || c < 1 {
		return base{}, fmt.Errorf("tta: head is %d×%d, model embeds in %d dims", c, d, m.EmbedDim())
	}
	if err := checkOptimizer(name, opt); err != nil {
		return base{}, err
	}
	f64 := m.Float64()
	tr, err := newTrainer(m, f64, opt)
	if err != nil {
		return base{}, err
	}
	return base{name: name, model: m, text: mat.DenseCopyOf(head), scale: m.InverseTemperature(), f64: f64, tr: tr}, nil
}

// ErrNoOptimizer: a method that trains was given the zero optim.Config,
// as a preset's Config carries it (Preset.New fills it in from
// Preset.Optimizer).
var ErrNoOptimizer = errors.New("tta: no optimizer")

// checkOptimizer refuses the zero optim.Config, which would train with a
// learning rate of 0 without a word.
func checkOptimizer(method string, c optim.Config) error {
	if c == (optim.Config{}) {
		return fmt.Errorf("%w for %s: its config's Optimizer is zero (a preset's config leaves it to Preset.New, which sets it from Preset.Optimizer)", ErrNoOptimizer, method)
	}
	return nil
}

// Name returns the method's name.
func (b *base) Name() string { return b.name }

// HeadMatrix returns a zero-shot head's class weights (C×d, such as
// clip.ZeroShot.Weights) as a float64 matrix, the form Methods take.
func HeadMatrix(w smat.Matrix) *mat.Dense {
	s := w.Shape()
	return mat.NewDense(s[0], s[1], w.Data().F64())
}

// forward runs the vision tower on a fresh tape and returns the feature node
// and a float64 copy of its value. With grad the LayerNorms are trainable and
// the tape keeps what a backward pass needs; without, nothing is kept (a
// prediction).
func (b *base) forward(pixels []float32, n int, grad bool) (smat.Tensor, *mat.Dense, error) {
	x, err := b.images(pixels, n)
	if err != nil {
		return nil, nil, err
	}
	node, f := b.encode(x, grad)
	return node, f, nil
}

// images wraps n images as the vision tower's input (Model.Images).
func (b *base) images(pixels []float32, n int) (smat.Matrix, error) {
	x, err := b.model.Images(pixels, n)
	if err != nil {
		return nil, fmt.Errorf("tta: %w", err)
	}
	return x, nil
}

// encode is forward on images already wrapped (images): a step that
// encodes one batch in several passes wraps it once and holds it on the
// device (autograd.HoldOnDevice), so that it goes up once.
func (b *base) encode(x smat.Tensor, grad bool) (smat.Tensor, *mat.Dense) {
	b.model.SetVisionTrainable(grad)
	node := b.model.ImageFeatures(x)
	s := node.Value().Shape()
	vals := append([]float64(nil), node.Value().Data().F64()...)
	return node, mat.NewDense(s[0], s[1], vals)
}

// backward zeroes the parameter gradients, injects grad (∂L/∂F, rows of the
// feature node) and runs the tape backward, leaving ∂L/∂θ on the LayerNorm
// parameters.
func (b *base) backward(node smat.Tensor, grad mat.Matrix) error {
	b.tr.zeroGrad()
	r, c := grad.Dims()
	if s := node.Value().Shape(); s[0] != r || s[1] != c {
		return fmt.Errorf("tta: backward: gradient is %d×%d, features %v", r, c, s)
	}
	if err := injectGrad(node, grad, b.f64); err != nil {
		return fmt.Errorf("tta: backward: %w", err)
	}
	return nil
}

// injectGrad adds grad (a float64 matrix of node's shape) to node's
// gradient in the model's precision and runs the tape backward from it.
func injectGrad(node smat.Tensor, grad mat.Matrix, f64 bool) error {
	r, c := grad.Dims()
	vals := make([]float64, 0, r*c)
	for i := range r {
		for j := range c {
			vals = append(vals, grad.At(i, j))
		}
	}
	var g smat.Matrix
	if f64 {
		g = smat.NewDense[float64](smat.WithShape(r, c), smat.WithBacking(vals))
	} else {
		g = smat.NewDense[float32](smat.WithShape(r, c), smat.WithBacking(float.SliceValueOf[float32](float.Make(vals...))))
	}
	node.AccGrad(g)
	return ag.Backward(node)
}

// update steps the optimizer and records the outcome in d.
func (b *base) update(d *Diagnostics) error {
	stepped, err := b.tr.step()
	if err != nil {
		return err
	}
	b.count(d, stepped)
	return nil
}

func (b *base) count(d *Diagnostics, stepped bool) {
	if stepped {
		d.Steps++
	} else {
		d.Skipped++
	}
}

// classify returns the zero-shot logits scale·normalize(f)·Tᵀ and predictions.
func (b *base) classify(f *mat.Dense) (*mat.Dense, []int) {
	return feature.Classify(f, b.text, b.scale)
}

// Reset restores the source weights and a fresh optimizer: a new domain,
// for a method that keeps nothing else (a method with memory overrides it).
func (b *base) Reset() error { b.reset(); return nil }

// ResetSample restores the source weights and a fresh optimizer; the
// method's memory stays.
func (b *base) ResetSample() error { b.reset(); return nil }

func (b *base) reset() {
	b.tr.restoreSource()
	b.tr.resetOptimizer()
	b.tr.zeroGrad()
}
