package online

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/vit"
	"github.com/subtta/subtta/weights"
)

// newImageDomain is a domain of n random 32-pixel images, the same for the
// same seed.
func newImageDomain(n int, seed uint64) Domain {
	rng := rand.New(rand.NewPCG(seed, 1))
	images, labels := make([][]float32, n), make([]int, n)
	for i := range images {
		images[i] = make([]float32, 3*32*32)
		for j := range images[i] {
			images[i][j] = float32(rng.NormFloat64())
		}
		labels[i] = i % 3
	}
	return fxt.NewDomain("images", images, labels)
}

// towerMethod encodes each batch with a vision tower, over the pixels it
// is given (as clip.Model.Images wraps them) or, with copyFirst, over a
// copy (as a method encoding views made from the batch does), and keeps
// the features; failAt > 0 fails that step.
type towerMethod struct {
	tta.Stateless
	tower     *vit.Model
	copyFirst bool
	failAt    int
	features  [][]float32
}

func (m *towerMethod) Name() string       { return "tower" }
func (m *towerMethod) Reset() error       { return nil }
func (m *towerMethod) ResetSample() error { return nil }
func (m *towerMethod) Step(px []float32, n int) (*tta.Result, error) {
	if m.failAt > 0 && len(m.features) == m.failAt {
		return nil, errors.New("step failed")
	}
	if m.copyFirst {
		px = slices.Clone(px)
	}
	x := smat.NewDense[float32](smat.WithShape(n, len(px)/n), smat.WithBacking(px))
	f := slices.Clone(m.tower.Forward(x, nil).Value().Data().F32())
	m.features = append(m.features, f)
	dim := len(f) / n
	preds := make([]int, n)
	feats := mat.NewDense(n, dim, nil)
	for i := range n {
		for j := range dim {
			feats.Set(i, j, float64(f[i*dim+j]))
		}
		if f[i*dim] > 0 {
			preds[i] = 1
		}
	}
	return &tta.Result{Preds: preds, Features: feats}, nil
}

// TestRunnerUploadsAhead runs a stream with a device that is a
// kernel.Prefetcher (devicetest.LatePrefetcher: the values land only when a
// pass awaits them, NaN before) and checks that the reader uploaded every
// batch ahead, that the passes read those copies (the features are bit for
// bit those of the same device without uploads ahead), and that every copy
// was freed; that a method whose passes do not read the batch stops the
// uploads ahead after its first step; and that a stream stopped by an
// error frees the copy of the batch read ahead.
func TestRunnerUploadsAhead(t *testing.T) {
	cfg := &weights.CLIPConfig{
		EmbedDim:     8,
		Vision:       weights.VisionConfig{Width: 16, Layers: 1, Heads: 2, MLPWidth: 32, PatchSize: 16, ImageSize: 32},
		LayerNormEps: weights.DefaultLayerNormEps,
		Activation:   "quick_gelu",
	}
	tower, err := vit.Random(cfg, 3, vit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n, bs = 23, 4
	batches := (n + bs - 1) / bs
	dom := newImageDomain(n, 9)
	run := func(d kernel.Device, m *towerMethod) error {
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		r := Runner{Method: m, Config: RunnerConfig{BatchSize: bs, Shuffle: true, Seed: 2}}
		_, err := r.Run([]Domain{dom})
		return err
	}

	plain := &towerMethod{tower: tower}
	if err := run(kernel.Host, plain); err != nil {
		t.Fatal(err)
	}
	late := &devicetest.LatePrefetcher{Device: kernel.Host}
	ahead := &towerMethod{tower: tower}
	if err := run(late, ahead); err != nil {
		t.Fatal(err)
	}
	if len(ahead.features) != batches {
		t.Fatalf("%d batches stepped, want %d", len(ahead.features), batches)
	}
	for b := range ahead.features {
		for i, v := range ahead.features[b] {
			if math.Float32bits(v) != math.Float32bits(plain.features[b][i]) {
				t.Fatalf("batch %d, feature %d: %g over the copy uploaded ahead, %g without", b, i, v, plain.features[b][i])
			}
		}
	}
	if up, awaits := late.Calls(); up != batches || awaits != batches {
		t.Errorf("%d batches uploaded ahead and %d awaited, want %d and %d", up, awaits, batches, batches)
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after the run", l)
	}

	// Passes over a copy of the batch: the uploads ahead stop.
	late = &devicetest.LatePrefetcher{Device: kernel.Host}
	if err := run(late, &towerMethod{tower: tower, copyFirst: true}); err != nil {
		t.Fatal(err)
	}
	if up, awaits := late.Calls(); up > 2 || awaits != 0 {
		t.Errorf("a method reading no batch's copy: %d uploads ahead (want at most 2: the first batch's and the one read meanwhile), %d awaits", up, awaits)
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after the run", l)
	}

	// A step fails: the batch read ahead is dropped with its copy.
	late = &devicetest.LatePrefetcher{Device: kernel.Host}
	if err := run(late, &towerMethod{tower: tower, failAt: 2}); err == nil {
		t.Fatal("the failing step's error was not returned")
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after a failed step", l)
	}
}
