package pretrain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// Trainer trains a CLIP from scratch on labelled images: every step
// encodes a batch of augmented images and one caption per class (a random
// template filled with the class name), and minimises the cross-entropy of
// the image-to-caption logits, exp(logit_scale)·cos(image, caption),
// against each image's class. The text tower is trained jointly, so the
// classifier is the text tower itself: afterwards zero-shot classification
// through prompts works as for any CLIP.
//
// Every random draw is a function of the seed and the step (the epoch's
// shuffle of the seed and the epoch), so a run resumed from a checkpoint at
// any step computes the same weights as one never interrupted.
type Trainer struct {
	Config Config
	Model  *clip.Model
	Params []NamedParam
	// Step is the number of optimizer steps taken.
	Step int

	scale    *smat.Dense[float32] // logit_scale, 1×1
	opt      *optim.Adam[float32] // linear and projection weights (decayed)
	optPlain *optim.Adam[float32] // everything else
	train    *Images
	dataID   DataIdentity // train's, recorded in checkpoints; computed when first needed
	pre      *data.Preprocessor
	tok      textenc.ByteTokenizer
}

// NewTrainer returns a trainer of a freshly initialised model on train.
func NewTrainer(cfg Config, train *Images) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := RandomState(&cfg.Model, cfg.Seed)
	if err != nil {
		return nil, err
	}
	return newTrainer(cfg, train, s)
}

// newTrainer builds the model from s (OpenAI names, logit_scale
// included) and the optimizers with empty state.
func newTrainer(cfg Config, train *Images, s *weights.State) (*Trainer, error) {
	if train != nil {
		if train.Size != cfg.Model.Vision.ImageSize {
			return nil, fmt.Errorf("pretrain: images are %d×%d, the model takes %d×%d", train.Size, train.Size, cfg.Model.Vision.ImageSize, cfg.Model.Vision.ImageSize)
		}
		if len(train.Classes) != len(cfg.Classes) {
			return nil, fmt.Errorf("pretrain: the images have %d classes, the captions %d", len(train.Classes), len(cfg.Classes))
		}
	}
	m, err := clip.New(s, &cfg.Model, clip.Options{})
	if err != nil {
		return nil, err
	}
	ls, err := s.Scalar("logit_scale")
	if err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	pre, err := m.Preprocessor()
	if err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	t := &Trainer{Config: cfg, Model: m, train: train, pre: pre}
	t.scale = smat.NewDense[float32](smat.WithShape(1, 1), smat.WithBacking([]float32{ls}))
	if t.Params, err = Params(m, t.scale); err != nil {
		return nil, err
	}
	adam := optim.AdamConfig{LR: cfg.LR, Beta1: 0.9, Beta2: cfg.Beta2, Eps: 1e-8, WeightDecay: cfg.WeightDecay, Decoupled: true}
	if t.opt, err = optim.NewAdam[float32](adam); err != nil {
		return nil, err
	}
	adam.WeightDecay = 0
	if t.optPlain, err = optim.NewAdam[float32](adam); err != nil {
		return nil, err
	}
	t.setTrainable(true)
	return t, nil
}

// setTrainable marks every parameter as requiring gradients, or none.
func (t *Trainer) setTrainable(on bool) {
	for _, p := range t.Params {
		p.Value.SetRequiresGrad(on)
		if !on {
			p.Value.ZeroGrad()
		}
	}
}

// dataIdentity returns the identity of the training set, computing it
// once.
func (t *Trainer) dataIdentity() DataIdentity {
	if t.dataID.SHA256 == "" {
		t.dataID = t.train.Identity()
	}
	return t.dataID
}

// StepsPerEpoch is the number of full batches in the training set (the
// last, partial batch of an epoch's shuffle is dropped).
func (t *Trainer) StepsPerEpoch() int { return t.train.Len() / t.Config.BatchSize }

// TotalSteps is the number of steps of the whole run.
func (t *Trainer) TotalSteps() int { return t.Config.Epochs * t.StepsPerEpoch() }

// Epoch is the epoch the next step belongs to (0-based).
func (t *Trainer) Epoch() int { return t.Step / t.StepsPerEpoch() }

// LogitScale returns the current temperature exp(logit_scale).
func (t *Trainer) LogitScale() float64 { return math.Exp(float64(t.scale.Data().F32()[0])) }

// StepResult is what one training step measured.
type StepResult struct {
	Loss     float64
	Correct  int // images whose caption logit was the largest
	Images   int
	LR       float64
	GradNorm float64 // before clipping
	Skipped  bool    // a non-finite gradient: no update was made
}

// batchIndices returns the images of the step's batch: a slice of the
// epoch's seeded permutation.
func (t *Trainer) batchIndices(step int) []int {
	spe := t.StepsPerEpoch()
	epoch, k := step/spe, step%spe
	perm := rand.New(rand.NewPCG(t.Config.Seed, uint64(epoch)<<1|1)).Perm(t.train.Len())
	return perm[k*t.Config.BatchSize : (k+1)*t.Config.BatchSize]
}

// captions returns one tokenized caption per class for the step.
func (t *Trainer) captions(r *rand.Rand) ([][]int, error) {
	ctx := t.Config.Model.Text.ContextLength
	ids := make([][]int, len(t.Config.Classes))
	for i, c := range t.Config.Classes {
		tmpl := t.Config.Templates[r.IntN(len(t.Config.Templates))]
		var err error
		if ids[i], err = t.tok.Tokenize(strings.ReplaceAll(tmpl, "{}", c), ctx, true); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// TrainStep takes the next optimizer step.
func (t *Trainer) TrainStep() (StepResult, error) {
	if t.train == nil {
		return StepResult{}, errors.New("pretrain: no training images")
	}
	cfg := &t.Config
	step := t.Step
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(step)<<1))
	idx := t.batchIndices(step)
	n := len(idx)
	size := cfg.Model.Vision.ImageSize
	per := t.pre.OutputLen()
	pixels := make([]float32, n*per)
	labels := make([]int, n)
	aug := data.NewRGB(size, size)
	for k, i := range idx {
		Augment(aug, t.train.Image(i), cfg.Pad, cfg.Flip, r)
		if _, err := t.pre.Transform(pixels[k*per:(k+1)*per], aug); err != nil {
			return StepResult{}, fmt.Errorf("pretrain: image %d: %w", i, err)
		}
		labels[k] = t.train.Labels[i]
	}
	caps, err := t.captions(r)
	if err != nil {
		return StepResult{}, err
	}

	x := smat.NewDense[float32](smat.WithShape(n, 3*size*size), smat.WithBacking(pixels))
	loss, logits, err := Loss(t.Model, t.scale, x, caps, labels, cfg.LabelSmoothing)
	if err != nil {
		return StepResult{}, err
	}
	res := StepResult{Loss: float64(loss.Value().Data().F32()[0]), Images: n, LR: cfg.LearningRate(step, t.TotalSteps())}
	lv := logits.Value().Data().F32()
	k := len(cfg.Classes)
	for i, l := range labels {
		row := lv[i*k : (i+1)*k]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if best == l {
			res.Correct++
		}
	}

	for _, p := range t.Params {
		p.Value.ZeroGrad()
	}
	if err := ag.Backward(loss); err != nil {
		return res, fmt.Errorf("pretrain: backward: %w", err)
	}
	decayed, plain := t.collect()
	res.GradNorm = clipGrads(append(decayed, plain...), cfg.ClipNorm)
	t.opt.Config.LR, t.optPlain.Config.LR = res.LR, res.LR
	ok1, err := t.opt.Step(decayed)
	if err != nil {
		return res, err
	}
	ok2, err := t.optPlain.Step(plain)
	if err != nil {
		return res, err
	}
	res.Skipped = !ok1 || !ok2
	if v := t.scale.Data().F32(); float64(v[0]) > maxLogitScale {
		t.scale.SetData(float.Make(float32(maxLogitScale)))
	}
	for _, p := range t.Params {
		p.Value.ZeroGrad()
	}
	t.Step++
	return res, nil
}

// Loss records on the tape the training loss of a batch: images [n,
// 3·H·W] (preprocessed), one tokenized caption per class, and each image's
// class. The logits are exp(logitScale)·cos(image, caption) [n, classes];
// the loss is their cross-entropy against the labels, with label smoothing
// eps: (1−ε)·CE + ε·(−mean log p).
func Loss(m *clip.Model, logitScale smat.Matrix, images smat.Tensor, captions [][]int, labels []int, eps float64) (loss, logits smat.Tensor, err error) {
	imgF := m.Vision.Forward(images, nil)
	txtF, err := m.Text.Forward(captions, nil)
	if err != nil {
		return nil, nil, err
	}
	sim := autograd.MatMul(autograd.L2Normalize(imgF), autograd.L2Normalize(txtF), false, true)
	logits = autograd.ExpScale(sim, logitScale)
	loss = autograd.CrossEntropy(logits, labels)
	if eps > 0 {
		uniform := autograd.Scale(autograd.Mean(autograd.LogSoftmax(logits)), -eps)
		loss = autograd.Add(autograd.Scale(loss, 1-eps), uniform)
	}
	return loss, logits, nil
}

// collect returns the parameters with their gradients, split into those
// that are decayed and those that are not.
func (t *Trainer) collect() (decayed, plain []optim.Param[float32]) {
	for _, p := range t.Params {
		d := p.Value.(*smat.Dense[float32])
		tp := optim.Param[float32]{Name: p.Name, Value: float.SliceValueOf[float32](d.Data())}
		if p.Value.HasGrad() {
			tp.Grad = float.SliceValueOf[float32](p.Value.Grad().Value().Data())
		}
		if p.Decay {
			decayed = append(decayed, tp)
		} else {
			plain = append(plain, tp)
		}
	}
	return decayed, plain
}

// clipGrads scales every gradient so that their joint L2 norm is at most
// maxNorm (when maxNorm > 0) and returns the norm before scaling.
func clipGrads(ps []optim.Param[float32], maxNorm float64) float64 {
	var s float64
	for _, p := range ps {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	norm := math.Sqrt(s)
	if maxNorm > 0 && norm > maxNorm {
		f := float32(maxNorm / (norm + 1e-6))
		for _, p := range ps {
			for i := range p.Grad {
				p.Grad[i] *= f
			}
		}
	}
	return norm
}

// Accuracy classifies images zero-shot, through the text tower on the
// captions of every template averaged per class (clip.Model.ZeroShotHead),
// and returns the fraction classified correctly (of limit images spread
// over the set when limit > 0).
func (t *Trainer) Accuracy(ctx context.Context, set *Images, limit int) (float64, error) {
	t.setTrainable(false)
	defer t.setTrainable(true)
	return ZeroShotAccuracy(ctx, t.Model, t.tok, t.Config.Classes, t.Config.Templates, set, limit)
}

// ZeroShotAccuracy is the fraction of set that m classifies correctly
// zero-shot with the given classes and templates; limit > 0 takes that many
// images spread over the set.
func ZeroShotAccuracy(ctx context.Context, m *clip.Model, tok textenc.Tokenizer, classes, templates []string, set *Images, limit int) (float64, error) {
	head, err := m.ZeroShotHead(tok, classes, templates)
	if err != nil {
		return 0, err
	}
	// With a limit, images spread evenly over the set (every class of a
	// class-ordered folder), as data.Spread takes them.
	n := set.Len()
	index := func(j int) int { return j }
	if limit > 0 && limit < n {
		total := n
		n = limit
		index = func(j int) int { return j * total / n }
	}
	pre, err := m.Preprocessor()
	if err != nil {
		return 0, err
	}
	const batch = 250
	correct := 0
	imgs := make([]*data.RGB, 0, batch)
	var pixels []float32
	for lo := 0; lo < n; lo += batch {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		hi := min(lo+batch, n)
		imgs = imgs[:0]
		for i := lo; i < hi; i++ {
			imgs = append(imgs, set.Image(index(i)))
		}
		if pixels, err = pre.Batch(pixels, imgs); err != nil {
			return 0, err
		}
		f, err := m.EncodeImage(pixels, hi-lo)
		if err != nil {
			return 0, err
		}
		probs := clip.Softmax(m.Classify(head, f))
		for k, p := range probs {
			best := 0
			for j, v := range p {
				if v > p[best] {
					best = j
				}
			}
			if best == set.Labels[index(lo+k)] {
				correct++
			}
		}
	}
	return float64(correct) / float64(n), nil
}
