package eval

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta"
)

// finiteMethod checks the outputs of every step of a method (its logits
// and features) before the runner scores them or computes their
// diagnostics: a method whose adaptation diverged (a learning rate far
// too large) puts NaN or ±Inf into its weights, and then into its
// outputs, whose argmax would still be counted as predictions, and whose
// diagnostics fail far from the cause (an eigendecomposition of NaN). A
// step with a non-finite output fails with a *divergedError, naming the
// stream and the batch. It knows them through the runner's Resume hook
// (watch), which the runner calls at the start of every stream.
type finiteMethod struct {
	tta.Method
	stream    string // the stream in progress
	batch     int    // the index of the next batch of stream
	batchSize int
	// steps counts the optimizer steps the method took since its last
	// reset; restored is set when a stream continued from a checkpoint,
	// whose state holds steps not counted.
	steps    int
	restored bool
}

// finiteViews is a finiteMethod of a multi-view method, which the runner
// steps through StepViews (tta.MultiView).
type finiteViews struct {
	*finiteMethod
	mv tta.MultiView
}

// checkFinite returns m, checked by a finiteMethod, as a tta.MultiView
// when m is one; the checker follows the streams through the hook watch
// returns.
func checkFinite(m tta.Method, batchSize int) (tta.Method, *finiteMethod) {
	f := &finiteMethod{Method: m, batchSize: batchSize}
	if mv, ok := m.(tta.MultiView); ok {
		return finiteViews{f, mv}, f
	}
	return f, f
}

// watch returns the runner's Resume hook next (nil: none), recording the
// stream that starts and the batch it starts at.
func (f *finiteMethod) watch(next func(string) (int, error)) func(string) (int, error) {
	return func(stream string) (int, error) {
		skip := 0
		if next != nil {
			var err error
			if skip, err = next(stream); err != nil {
				return skip, err
			}
		}
		f.stream, f.batch = stream, skip
		f.restored = f.restored || skip > 0
		return skip, nil
	}
}

// Reset and ResetSample restore the method's weights: the steps counted
// start again.
func (f *finiteMethod) Reset() error {
	f.steps, f.restored = 0, false
	return f.Method.Reset()
}

func (f *finiteMethod) ResetSample() error {
	f.steps, f.restored = 0, false
	return f.Method.ResetSample()
}

func (f *finiteMethod) Step(pixels []float32, n int) (*tta.Result, error) {
	res, err := f.Method.Step(pixels, n)
	return f.check(res, err, n)
}

func (v finiteViews) Views() int             { return v.mv.Views() }
func (v finiteViews) ViewKind() tta.ViewKind { return v.mv.ViewKind() }

func (v finiteViews) StepViews(views []float32, n, nv int) (*tta.Result, error) {
	res, err := v.mv.StepViews(views, n, nv)
	return v.check(res, err, n)
}

// check refuses a step's result with a value that is not finite, and
// moves on to the next batch.
func (f *finiteMethod) check(res *tta.Result, err error, n int) (*tta.Result, error) {
	if err != nil || res == nil {
		return res, err
	}
	b := f.batch
	f.batch++
	f.steps += res.Diag.Steps
	for _, o := range []struct {
		name string
		m    *mat.Dense
	}{{"features", res.Features}, {"logits", res.Logits}} {
		if row, v, ok := nonFinite(o.m); ok {
			return nil, &divergedError{method: f.Name(), stream: f.stream, batch: b, first: b * f.batchSize, images: n,
				output: o.name, image: row, value: v, steps: f.steps, restored: f.restored}
		}
	}
	return res, nil
}

// nonFinite finds the first value of m that is NaN or ±Inf: its row and
// the value; ok is false when there is none (or m is nil).
func nonFinite(m *mat.Dense) (row int, v float64, ok bool) {
	if m == nil {
		return 0, 0, false
	}
	raw := m.RawMatrix()
	for i := range raw.Rows {
		for _, x := range raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols] {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return i, x, true
			}
		}
	}
	return 0, 0, false
}

// divergedError is a step whose output was not finite: the stream and
// batch, the output and the image of the batch where it was first seen,
// and the optimizer steps taken since the method's last reset (finiteMethod).
type divergedError struct {
	method, stream string
	batch          int // from 0, as batches.jsonl counts
	first, images  int // the batch's first image in the stream, and its image count
	output         string
	image          int
	value          float64
	steps          int
	restored       bool
}

func (e *divergedError) Error() string {
	return fmt.Sprintf("%s: the method's %s became %v at batch %d of %s (images %d to %d of its stream; image %d of the batch)",
		e.method, e.output, e.value, e.batch, e.stream, e.first, e.first+e.images-1, e.image)
}

// why says what makes a method's outputs non-finite, given the options
// the run set for it (Config.MethodOptions, for the method).
func (e *divergedError) why(options map[string]string) string {
	if e.steps == 0 && !e.restored {
		return "the method took no optimizer step since its reset, so the model's own outputs are not finite (its weights, or its arithmetic at this precision)"
	}
	given := "the preset's options"
	if len(options) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(options)) {
			kv = append(kv, e.method+"."+k+"="+options[k])
		}
		given = "--set " + strings.Join(kv, " --set ")
	}
	return fmt.Sprintf("its adaptation diverged, with %s: a learning rate (or another option) too large for this stream does this", given)
}
