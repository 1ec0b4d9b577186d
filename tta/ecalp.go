package tta

import (
	"math"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// ecalpMethod registers ECALP ([E] Yushu-Li/ECALP main.py, spec §6) with
// its defaults for every task (feature.DefaultECALPConfig: k_text 3,
// k_image 8, γ 10, α 1, 3 iterations), the base view only (the view count
// of the published corruption features is not given), batch 1 as in the
// code (ECALP takes a batch's images one at a time in order, so any batch
// size gives the same predictions). Head "a photo of a {}.": [E]'s text
// features are DMN's, whose ImageNet head (TIP templates and CuPL
// sentences) this port does not ship, and DMN has none for CIFAR.
var ecalpMethod = Registration{
	Name:  "ecalp",
	About: "training-free label propagation over a growing graph of the domain's images and the classes (ECALP)",
	Cost:  fixedCost(CostForward),
	Preset: func(p *Preset) error {
		p.BatchSize, p.Config = 1, feature.DefaultECALPConfig()
		return nil
	},
	Options: []Option{
		intOption("k_text", "neighbours of an image among the classes", 1, math.MaxInt, inConfig(func(c *feature.ECALPConfig) *int { return &c.KText })),
		intOption("k_image", "neighbours of an image among the images", 1, math.MaxInt, inConfig(func(c *feature.ECALPConfig) *int { return &c.KImage })),
		floatOption("gamma", "power γ of every edge weight", anyReal, inConfig(func(c *feature.ECALPConfig) *float64 { return &c.Gamma })),
		floatOption("alpha", "weight α of propagation against the prior", anyReal, inConfig(func(c *feature.ECALPConfig) *float64 { return &c.Alpha })),
		intOption("iterations", "propagation rounds", 1, math.MaxInt, inConfig(func(c *feature.ECALPConfig) *int { return &c.Iterations })),
	},
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[feature.ECALPConfig](p)
		if err != nil {
			return nil, err
		}
		return NewECALP(m, h.Head, cfg)
	},
}

// ECALP is ECALP on a CLIP model: training free, the weights never change.
// Every image's L2-normalised base-view feature joins the domain's graph
// (feature.ECALPGraph), labels propagate from the class nodes, and the
// image is predicted from its propagated labels. Reset empties the graph
// (a new domain); ResetSample keeps it.
type ECALP struct {
	base
	graph *feature.ECALPGraph
}

// NewECALP returns ECALP over the head (C×d, unit rows).
func NewECALP(m Model, head mat.Matrix, cfg feature.ECALPConfig) (*ECALP, error) {
	b, err := newBase("ecalp", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	g, err := feature.NewECALPGraph(head, cfg)
	if err != nil {
		return nil, err
	}
	e := &ECALP{base: b, graph: g}
	e.own = e
	return e, nil
}

// Reset empties the graph.
func (e *ECALP) Reset() error {
	e.reset()
	e.graph.Reset()
	return nil
}

// Step encodes the batch without a tape and adds its images to the graph
// one at a time, in order. The logits are the zero-shot head's; the
// predictions are ECALP's (their scores saturate in the code, so only the
// argmax is kept).
func (e *ECALP) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	_, f, err := e.forward(pixels, n, false)
	if err != nil {
		return nil, err
	}
	logits, zs := e.classify(f)
	fn, _ := feature.NormalizeRows(f)
	preds := make([]int, n)
	for i := range n {
		res, err := e.graph.Step(fn.RawRowView(i))
		if err != nil {
			return nil, err
		}
		preds[i] = res.Pred
	}
	d.PseudoLabels = zs
	d.since("predict", t0)
	return &Result{Logits: logits, Preds: preds, Features: f, Diag: d}, nil
}

func (e *ECALP) saveOwn() ([]byte, error) {
	s := e.graph.State()
	return gobBytes(&s)
}

func (e *ECALP) loadOwn(p []byte) (func(), error) {
	var s feature.ECALPState
	if err := ungob(p, &s); err != nil {
		return nil, err
	}
	check := *e.graph
	if err := check.SetState(s); err != nil {
		return nil, err
	}
	return func() { *e.graph = check }, nil
}
