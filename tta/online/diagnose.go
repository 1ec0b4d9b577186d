package online

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"gonum.org/v1/gonum/mat"
)

// DefaultDiagnosticWorkers is the number of goroutines that compute the
// batches' diagnostics when RunnerConfig.DiagnosticWorkers is 0: half of
// GOMAXPROCS, at least 1 and at most 8, the other cores being left to
// reading the next batches and to the method's own passes. On a GPU a
// batch's diagnostics (about 55 ms of one core at ViT-B/32's 512 dimensions
// and 1,000 classes) take longer than its step (about 20 ms); on the CPU,
// where the step takes longer, idle workers cost nothing.
func DefaultDiagnosticWorkers() int {
	return min(max(runtime.GOMAXPROCS(0)/2, 1), 8)
}

// diagInput is what a batch's diagnostics read.
type diagInput struct {
	features *mat.Dense // the prediction features, B×d, or nil
	basis    *mat.Dense // the method's alignment basis B_V, or nil
	preds    []int
	labels   []int
	// serial keeps the decomposition on the worker's goroutine: several
	// run at once.
	serial bool
}

// viewResult is the diagnostics' input that reads the method's result
// in place, for diagnostics computed before the method steps again.
func viewResult(res *tta.Result, labels []int) *diagInput {
	in := &diagInput{features: res.Features, preds: res.Preds, labels: labels}
	if a := res.Diag.Alignment; a != nil {
		in.basis = a.Basis
	}
	return in
}

// copyResult is the diagnostics' input copied out of the method's result,
// for diagnostics computed while the method steps again (it may reuse its
// buffers) and while the next batch is read into the labels' buffer.
func copyResult(res *tta.Result, labels []int) *diagInput {
	in := &diagInput{preds: slices.Clone(res.Preds), labels: slices.Clone(labels)}
	if res.Features != nil {
		in.features = mat.DenseCopyOf(res.Features)
	}
	if a := res.Diag.Alignment; a != nil && a.Basis != nil {
		in.basis = mat.DenseCopyOf(a.Basis)
	}
	return in
}

// copyDiagnostics copies a method's diagnostics for a record that may be
// handed on after the method's next step; the alignment is left out.
func copyDiagnostics(d tta.Diagnostics) tta.Diagnostics {
	d.Losses = maps.Clone(d.Losses)
	d.Timings = maps.Clone(d.Timings)
	d.PseudoLabels = slices.Clone(d.PseudoLabels)
	d.Alignment = nil
	return d
}

// diagJob is one batch's record waiting for its diagnostics; done
// receives diagnose's error once they are in rec.
type diagJob struct {
	rec  *BatchRecord
	in   *diagInput
	done chan error
}

// diagPool is the goroutines that compute diagnostics; lag is how many
// batches' records may wait beyond the one just stepped.
type diagPool struct {
	jobs chan *diagJob
	lag  int
	wg   sync.WaitGroup
}

// startDiagnostics starts the diagnostic workers the configuration asks
// for, or returns nil when the diagnostics are computed inline (none
// asked for, or no records to compute them for). close stops them.
func (r *Runner) startDiagnostics() (*diagPool, error) {
	c := r.Config
	n := c.DiagnosticWorkers
	if n == 0 {
		n = DefaultDiagnosticWorkers()
	}
	if n < 0 || c.Log == nil && c.OnBatch == nil {
		return nil, nil
	}
	if n > 1024 {
		return nil, fmt.Errorf("tta: runner: %d diagnostic workers (at most 1024)", n)
	}
	// The queue holds at most lag+1 records, each sent once: a buffer of
	// that size never blocks the runner.
	p := &diagPool{jobs: make(chan *diagJob, n+1), lag: n}
	p.wg.Add(n)
	for range n {
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				j.done <- r.diagnoseSafely(j.rec, j.in)
			}
		}()
	}
	return p, nil
}

// close stops the workers once they have finished what was sent; p may
// be nil.
func (p *diagPool) close() {
	if p == nil {
		return
	}
	close(p.jobs)
	p.wg.Wait()
}

// errDiagnosticsPanic is wrapped by the error of a worker whose
// diagnostics panicked.
var errDiagnosticsPanic = errors.New("panic")

// diagnoseSafely is diagnose, with a panic (a gonum dimension check, say)
// turned into an error: on a worker goroutine it would end the process
// before the records already computed were written.
func (r *Runner) diagnoseSafely(rec *BatchRecord, in *diagInput) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errDiagnosticsPanic, p)
		}
	}()
	return r.diagnose(rec, in)
}

// diagnose adds the geometric diagnostics to rec. The covariance basis is
// decomposed on the CPU whatever device is set: a worker must not use the
// device beside the method, and the bits are then the same for any
// number of workers (a decomposition is split over the cores or not, to
// the same bits).
func (r *Runner) diagnose(rec *BatchRecord, in *diagInput) error {
	f := in.features
	if f == nil {
		return nil
	}
	if ts := r.Config.Text; ts != nil {
		var bv mat.Matrix
		if in.basis != nil {
			bv = in.basis
		} else if n, _ := f.Dims(); n >= 2 {
			// The basis of the batch covariance alone (Align's with α = 0).
			b, err := feature.CovarianceBasisOnHost(f, ts, in.serial)
			if err != nil {
				return err
			}
			bv = b
		}
		if bv != nil {
			cos, err := feature.PrincipalAngleCosines(bv, ts.Basis)
			if err != nil {
				return err
			}
			rec.PrincipalCosines = cos
		}
		sc, err := feature.SemanticConcentration(f, ts.Projector)
		if err != nil {
			return err
		}
		m := mean(sc)
		rec.SemanticConcentration = &m
	}
	if r.Config.Head != nil {
		pc, err := feature.PredictedClassCosine(f, r.Config.Head, in.preds)
		if err != nil {
			return err
		}
		m := mean(pc)
		rec.PredictedClassCosine = &m
		tc, err := feature.PredictedClassCosine(f, r.Config.Head, in.labels)
		if err != nil {
			return err
		}
		mt := mean(tc)
		rec.TrueClassCosine = &mt
		correct := make([]bool, len(in.labels))
		for i, y := range in.labels {
			correct[i] = in.preds[i] == y
		}
		rec.SampleCosines = &SampleCosines{Predicted: pc, True: tc, Correct: correct}
	}
	return nil
}
