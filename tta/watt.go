package tta

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nlpodyssey/spago/mat/float"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
)

// WATTTemplates are WATT's eight prompt templates ([W] templates.yaml), in
// the order the sequential variant visits them. The first two have no final
// period, as in the file. WATT fills them with the dataset's class names
// unchanged (no underscore replacement).
var WATTTemplates = []string{
	"a photo of a {}", "itap of a {}", "a bad photo of the {}.", "a origami {}.",
	"a photo of the large {}.", "a {} in a video game.", "art of the {}.", "a photo of the small {}.",
}

// WATTTemperature is the temperature of WATT's soft targets: a literal 0.01
// in [W] adapt/watt.py.
const WATTTemperature = 0.01

// WATTConfig configures WATT.
type WATTConfig struct {
	// Optimizer is Adam with lr 1e-3 in the README and the bash scripts
	// (main.py's default is 1e-4), betas (0.9, 0.999), no weight decay.
	Optimizer optim.Config
	// Steps (L) is the number of optimizer steps per template, Rounds (M)
	// the number of weight-averaging rounds: 2 and 5 for WATT-S.
	Steps, Rounds int
	// Temperature of the soft targets; 0 means WATTTemperature.
	Temperature float64
	// Name is what Name reports; "" means "watt-s".
	Name string
}

// WATT is WATT-S, the sequential variant of WATT ([W] adapt/watt.py
// with type "sequential", spec §2.4). Every batch starts from the source
// weights and a fresh Adam. In each of Rounds rounds the method visits the
// template heads in order, each continuing from the previous template's
// weights, and takes Steps steps of WATTLoss against that head; after each
// template it takes a snapshot of the visual LayerNorm weights, and at the
// end of the round it loads the mean of the snapshots, from which the next
// round starts. Adam's state is never reset within a batch: it carries
// across templates and rounds, as in the code, where only the weights are
// reloaded after the first round. The batch is then classified with the
// averaged weights and the evaluation head (the normalised mean of the
// templates' normalised embeddings, [W]'s evaluate without ref_eval).
//
// Each step encodes the batch once: the code's no-grad pass for the
// pseudo-labels and its pass with gradient use the same weights, so the
// pseudo-labels come from the features of the pass with gradient. The
// snapshots are averaged in the model's element type, summed in template
// order and divided by their number, as the code's sum(...)/K does on
// float32 tensors. The prediction's logits use the model's logit scale (the
// code writes 100, which only scales the logits).
//
// Divergences from [W]: the code keeps the CLIP model in fp16 on CUDA
// (clip.load), this port computes in the model's precision (float32); and a
// step with a NaN or ±Inf gradient is skipped and counted, where torch's
// Adam would apply it.
type WATT struct {
	base
	heads []*mat.Dense
	cfg   WATTConfig
}

// NewWATT returns WATT-S on the model. head (C×d, unit rows) is the
// evaluation head; heads are the per-template training heads (C×d each,
// unit rows), one per template in visiting order (WATTTemplates, each alone).
func NewWATT(m Model, head mat.Matrix, heads []mat.Matrix, cfg WATTConfig) (*WATT, error) {
	if len(heads) == 0 {
		return nil, errors.New("tta: watt: no template heads")
	}
	if cfg.Steps < 1 || cfg.Rounds < 1 {
		return nil, fmt.Errorf("tta: watt: steps per template %d and rounds %d must be positive", cfg.Steps, cfg.Rounds)
	}
	if cfg.Temperature < 0 {
		return nil, fmt.Errorf("tta: watt: negative temperature %g", cfg.Temperature)
	}
	if cfg.Temperature == 0 {
		cfg.Temperature = WATTTemperature
	}
	b, err := newBase(m, head, cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	w := &WATT{base: b, cfg: cfg}
	c, d := head.Dims()
	for i, h := range heads {
		if hc, hd := h.Dims(); hc != c || hd != d {
			return nil, fmt.Errorf("tta: watt: template head %d is %d×%d, evaluation head %d×%d", i, hc, hd, c, d)
		}
		w.heads = append(w.heads, mat.DenseCopyOf(h))
	}
	return w, nil
}

// Name returns the configured name, "watt-s" by default.
func (w *WATT) Name() string {
	if w.cfg.Name != "" {
		return w.cfg.Name
	}
	return "watt-s"
}

// Reset restores the source weights and a fresh optimizer. Step starts
// every batch that way itself, so WATT keeps no state between batches.
func (w *WATT) Reset() error { w.reset(); return nil }

// Step adapts on the batch from the source weights and classifies it with
// the averaged weights. Diag.Losses["watt"] is the mean WATTLoss over the
// batch's Rounds·len(heads)·Steps steps, "watt_first" that of the first step
// (source weights, first template).
func (w *WATT) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	w.reset()
	avg := newWeightAverager(w.tr)
	var sum float64
	steps := 0
	for r := range w.cfg.Rounds {
		if r > 0 {
			avg.load()
		}
		avg.clear()
		for _, head := range w.heads {
			for range w.cfg.Steps {
				node, f, err := w.forward(pixels, n, true)
				if err != nil {
					return nil, err
				}
				res, err := WATTLoss(f, head, w.scale, w.cfg.Temperature)
				if err != nil {
					return nil, err
				}
				if steps == 0 {
					d.Losses["watt_first"] = res.Loss
				}
				sum += res.Loss
				steps++
				if err := w.backward(node, res.DLdF); err != nil {
					return nil, err
				}
				if err := w.update(&d); err != nil {
					return nil, err
				}
			}
			avg.add()
		}
	}
	avg.load()
	w.tr.zeroGrad()
	d.Losses["watt"] = sum / float64(steps)
	d.since("adapt", t0)

	t0 = time.Now()
	_, f, err := w.forward(pixels, n, false)
	if err != nil {
		return nil, err
	}
	logits, preds := w.head(f)
	d.since("predict", t0)
	return &Result{Logits: logits, Preds: preds, Features: f, Diag: d}, nil
}

// WATTResult is WATTLoss's result on one batch for one template.
type WATTResult struct {
	// Preds are the pseudo-labels argmax normalize(F)·Tᵀ (no gradient).
	Preds []int
	// Targets is Q (B×B), the row-softmax of (Ẑ·Ẑᵀ + T̂·T̂ᵀ)/2/temperature,
	// Ẑ = normalize(F) and T̂ the text rows of the pseudo-labels. Image i's
	// target is column i.
	Targets *mat.Dense
	Loss    float64
	DLdF    *mat.Dense // ∂Loss/∂F (B×d)
}

// WATTLoss computes WATT's loss for one template ([W] adapt/watt.py,
// WATT.perform_adaptation) on the unnormalised image features f (B×d) with
// the template's class embeddings t (C×d, unit rows), logit scale
// scale = exp(logit_scale) and temperature (WATTTemperature in the code):
//
//	Ẑ = normalize(F), ŷ = argmax Ẑ·tᵀ, T̂ = t[ŷ] (B×d),
//	Q = rowsoftmax((Ẑ·Ẑᵀ + T̂·T̂ᵀ)/2/temperature),
//	L = (1/B) Σ_i Σ_b −Q[b,i]·log softmax_b(scale·ẑ_i·t̂_b).
//
// Row b of Q is a distribution, but the target of image i is column i, as in
// the code (its cross_entropy takes logits.t() against targets.t()). Q is
// not detached: the image–image similarity in it carries gradient, which
// DLdF includes. The pseudo-labels carry none.
func WATTLoss(f, t mat.Matrix, scale, temperature float64) (*WATTResult, error) {
	if err := checkFeatures(f, t, "watt loss"); err != nil {
		return nil, err
	}
	if !(temperature > 0) {
		return nil, errors.New("tta: watt loss: temperature must be positive")
	}
	b, d := f.Dims()
	z, norms := NormalizeRows(f)
	var cos mat.Dense
	cos.Mul(z, t.T())
	preds := Argmax(&cos)
	that := mat.NewDense(b, d, nil)
	for i, y := range preds {
		for j := range d {
			that.Set(i, j, t.At(y, j))
		}
	}

	// P[i,b] = scale·ẑ_i·t̂_b, the code's logits.t().
	p := Logits(z, that, scale)
	// A = (ẐẐᵀ + T̂T̂ᵀ)/(2·temperature), Q its row-softmax.
	var zz, tt mat.Dense
	zz.Mul(z, z.T())
	tt.Mul(that, that.T())
	q := mat.NewDense(b, b, nil)
	q.Add(&zz, &tt)
	q.Scale(1/(2*temperature), q)
	for k := range b {
		softmaxInPlace(q.RawRowView(k))
	}

	// Log-softmax of P's rows, the loss, and ∂L/∂P[i,b] = (S[i,b]·w_i −
	// Q[b,i])/B with S = softmax(P) and w_i = Σ_b Q[b,i].
	ls := mat.NewDense(b, b, nil)
	dp := mat.NewDense(b, b, nil)
	var loss float64
	for i := range b {
		row := ls.RawRowView(i)
		copy(row, p.RawRowView(i))
		logSoftmaxInPlace(row)
		var w float64
		for k := range b {
			loss -= q.At(k, i) * row[k]
			w += q.At(k, i)
		}
		for k := range b {
			dp.Set(i, k, (math.Exp(row[k])*w-q.At(k, i))/float64(b))
		}
	}
	loss /= float64(b)

	// Through P: ∂L/∂Ẑ = scale·∂L/∂P·T̂.
	var dz mat.Dense
	dz.Mul(dp, that)
	dz.Scale(scale, &dz)
	// Through Q: ∂L/∂Q[k,i] = −LS[i,k]/B; the row-softmax backward gives
	// ∂L/∂A[k,i] = Q[k,i]·(∂L/∂Q[k,i] − Σ_j Q[k,j]·∂L/∂Q[k,j]); and
	// A = ẐẐᵀ/(2·temperature) + const gives ∂L/∂Ẑ += (∂L/∂A + ∂L/∂Aᵀ)·Ẑ/(2·temperature).
	da := mat.NewDense(b, b, nil)
	for k := range b {
		var s float64
		for i := range b {
			s += q.At(k, i) * -ls.At(i, k) / float64(b)
		}
		for i := range b {
			da.Set(k, i, q.At(k, i)*(-ls.At(i, k)/float64(b)-s))
		}
	}
	var sym mat.Dense
	sym.Add(da, da.T())
	var dzq mat.Dense
	dzq.Mul(&sym, z)
	dzq.Scale(1/(2*temperature), &dzq)
	dz.Add(&dz, &dzq)

	return &WATTResult{
		Preds:   preds,
		Targets: q,
		Loss:    loss,
		DLdF:    normalizeRowsBackward(z, norms, &dz),
	}, nil
}

// weightAverager keeps snapshots of a trainer's parameters and loads their
// mean, in the trainer's element type.
type weightAverager interface {
	add()   // snapshot the current values
	load()  // overwrite the values with the mean of the snapshots
	clear() // forget the snapshots
}

func newWeightAverager(tr trainer) weightAverager {
	switch tr := tr.(type) {
	case *lnTrainer[float32]:
		return &lnAverager[float32]{tr: tr}
	case *lnTrainer[float64]:
		return &lnAverager[float64]{tr: tr}
	}
	panic(fmt.Sprintf("tta: watt: trainer %T", tr))
}

type lnAverager[T float.DType] struct {
	tr    *lnTrainer[T]
	snaps [][][]T // snapshot, parameter, element
}

func (a *lnAverager[T]) add() {
	s := make([][]T, len(a.tr.params))
	for i, p := range a.tr.params {
		s[i] = append([]T(nil), p.Value...)
	}
	a.snaps = append(a.snaps, s)
}

func (a *lnAverager[T]) load() {
	if len(a.snaps) == 0 {
		return
	}
	k := T(len(a.snaps))
	for i, p := range a.tr.params {
		for j := range p.Value {
			var s T
			for _, snap := range a.snaps {
				s += snap[i][j]
			}
			p.Value[j] = s / k
		}
	}
}

func (a *lnAverager[T]) clear() { a.snaps = a.snaps[:0] }
