package eval

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/online"
)

// domain is one domain of the evaluation: a dataset (a corruption at a
// severity), preprocessed for the model. The runner orders it and cuts it
// to the run's limit (online.RunnerConfig).
// It is a online.BatchDomain: a batch is decoded, corrupted (on the fly) and
// preprocessed by several goroutines at once.
type domain struct {
	name       string
	corruption string
	severity   int
	// down marks the way down of the gradual protocol: its records are
	// domains of their own (no corruption and severity), so that the
	// tables keep the way up.
	down    bool
	ds      data.Dataset
	pre     *data.Preprocessor
	workers int
}

var (
	_ online.BatchDomain = (*domain)(nil)
	_ online.ViewDomain  = (*domain)(nil)
)

func (d *domain) Name() string { return d.name }
func (d *domain) Len() int     { return d.ds.Len() }

func (d *domain) Sample(i int) ([]float32, int, error) {
	img, label, err := d.ds.Item(i)
	if err != nil {
		return nil, 0, err
	}
	px, err := d.pre.Transform(nil, img)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: image %d: %w", d.name, i, err)
	}
	return px, label, nil
}

func (d *domain) Samples(idx []int, dst []float32) ([]float32, []int, error) {
	return d.views(idx, 1, tta.CropFlip, 0, dst)
}

// ViewSamples gives v views of each image: the base view, then random
// crops with flips (data.Preprocessor.Views) or AugMix views
// (data.Preprocessor.AugMixViews), drawn from data.ViewRNG(seed, the
// domain's name, the image's index).
func (d *domain) ViewSamples(idx []int, v int, kind tta.ViewKind, seed uint64, dst []float32) ([]float32, []int, error) {
	return d.views(idx, v, kind, seed, dst)
}

// views decodes, corrupts and preprocesses the images of idx in parallel
// into v views each (v = 1: the base view alone).
func (d *domain) views(idx []int, v int, kind tta.ViewKind, seed uint64, dst []float32) ([]float32, []int, error) {
	n := v * d.pre.OutputLen()
	base := len(dst)
	dst = append(dst, make([]float32, n*len(idx))...)
	labels := make([]int, len(idx))
	errs := make([]error, len(idx))
	workers := d.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(workers, len(idx)) {
		wg.Go(func() {
			for j := range next {
				k := idx[j]
				img, label, err := d.ds.Item(k)
				if err == nil {
					off := base + j*n
					switch {
					case v == 1:
						_, err = d.pre.Transform(dst[off:off+n], img)
					case kind == tta.AugMix:
						one := n / v
						if _, err = d.pre.Transform(dst[off:off+one], img); err == nil {
							_, err = d.pre.AugMixViews(dst[off+one:off+n], img, v-1, data.ViewRNG(seed, d.name, k))
						}
					default:
						_, err = d.pre.Views(dst[off:off+n], img, v, data.ViewRNG(seed, d.name, k))
					}
				}
				labels[j], errs[j] = label, err
			}
		})
	}
	for j := range idx {
		next <- j
	}
	close(next)
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("image %d: %w", idx[j], err)
		}
	}
	return dst, labels, nil
}
