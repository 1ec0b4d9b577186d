package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/tta"
)

// TestDivergedMethodSaysSo: a method whose adaptation diverges (tent with
// a learning rate of 1e308) stops the run with the stream and batch where
// its outputs became non-finite and the likely cause, the option named,
// before their diagnostics run (which failed on an eigendecomposition of
// NaN, blaming the diagnostics); the domains finished before, source's,
// stay in results.jsonl.
func TestDivergedMethodSaysSo(t *testing.T) {
	for _, workers := range []int{-1, 2} {
		t.Run(fmt.Sprintf("diag-workers=%d", workers), func(t *testing.T) {
			cfg := smallRun(t, t.TempDir(), "contrast")
			cfg.Methods = []string{"source", "tent"}
			cfg.MethodOptions = MethodOptions{"tent": {"lr": "1e308"}}
			_, err := Run(context.Background(), cfg, Options{DiagnosticWorkers: workers})
			var d *divergedError
			if !errors.As(err, &d) {
				t.Fatalf("err = %v, want a divergence", err)
			}
			for _, want := range []string{
				fmt.Sprintf("eval: tent: the method's features became NaN at batch %d of contrast/5 (images %d to %d of its stream; image ", d.batch, 4*d.batch, 4*d.batch+3),
				"its adaptation diverged, with --set tent.lr=1e308: a learning rate (or another option) too large for this stream does this",
				"no domain of tent had finished, so none is stored",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v\nwant %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "diagnostics") {
				t.Errorf("err = %v: blames the diagnostics", err)
			}
			recs, err := report.ReadRecordsFile(filepath.Join(cfg.Out, ResultsFile))
			if err != nil || len(recs) != 1 || recs[0].Method != "source" {
				t.Errorf("records %+v (%v), want source's alone", recs, err)
			}
		})
	}
}

// stubMethod returns the logits and features it is given at every step.
type stubMethod struct {
	logits, features *mat.Dense
	steps            int // optimizer steps each Step reports
}

func (m *stubMethod) Name() string                    { return "stub" }
func (m *stubMethod) Reset() error                    { return nil }
func (m *stubMethod) ResetSample() error              { return nil }
func (m *stubMethod) MarshalBinary() ([]byte, error)  { return nil, nil }
func (m *stubMethod) UnmarshalBinary([]byte) error    { return nil }
func (m *stubMethod) MarshalCarried() ([]byte, error) { return nil, nil }
func (m *stubMethod) UnmarshalCarried([]byte) error   { return nil }
func (m *stubMethod) Step([]float32, int) (*tta.Result, error) {
	return &tta.Result{Logits: m.logits, Features: m.features, Preds: []int{0, 0}, Diag: tta.Diagnostics{Steps: m.steps}}, nil
}

// stubViews is a stubMethod of several views.
type stubViews struct{ *stubMethod }

func (stubViews) Views() int             { return 4 }
func (stubViews) ViewKind() tta.ViewKind { return tta.CropFlip }
func (v stubViews) StepViews(px []float32, n, _ int) (*tta.Result, error) {
	return v.Step(px, n)
}

// TestFiniteMethod: the checker passes finite outputs on, refuses the
// first NaN or ±Inf of the features or logits with the stream, batch,
// images and image where it is, counts batches from where a stream
// resumes, says whether the method had adapted, and keeps a multi-view
// method one.
func TestFiniteMethod(t *testing.T) {
	finite := mat.NewDense(2, 3, nil)
	withNaN := mat.NewDense(2, 3, []float64{0, 0, 0, 0, math.NaN(), 0})
	withInf := mat.NewDense(2, 3, []float64{0, math.Inf(-1), 0, 0, 0, 0})
	for _, tc := range []struct {
		name             string
		logits, features *mat.Dense
		steps, skip      int
		says             string // "": passed on
		adapted          bool
	}{
		{"finite", finite, finite, 1, 0, "", false},
		{"no features", finite, nil, 1, 0, "", false},
		{"NaN features", finite, withNaN, 1, 0, "stub: the method's features became NaN at batch 2 of fog/5 (images 4 to 5 of its stream; image 1 of the batch)", true},
		{"-Inf logits", withInf, finite, 1, 0, "stub: the method's logits became -Inf at batch 2 of fog/5 (images 4 to 5 of its stream; image 0 of the batch)", true},
		{"after a checkpoint", withInf, finite, 1, 3, "at batch 5 of fog/5 (images 10 to 11", true},
		{"no step taken", withInf, finite, 0, 0, "at batch 2", false},
		{"no step since a checkpoint", withInf, finite, 0, 3, "at batch 5", true},
	} {
		for _, views := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/views=%v", tc.name, views), func(t *testing.T) {
				stub := &stubMethod{logits: finite, features: finite, steps: tc.steps}
				var m tta.Method = stub
				if views {
					m = stubViews{stub}
				}
				checked, f := checkFinite(m, 2)
				if _, ok := checked.(tta.MultiView); ok != views {
					t.Fatalf("a multi-view method: %v, checked: %v", views, ok)
				}
				if _, err := f.watch(func(string) (int, error) { return tc.skip, nil })("fog/5"); err != nil {
					t.Fatal(err)
				}
				step := func() (*tta.Result, error) {
					if views {
						return checked.(tta.MultiView).StepViews(nil, 2, 4)
					}
					return checked.Step(nil, 2)
				}
				for range 2 { // two finite batches first
					if _, err := step(); err != nil {
						t.Fatal(err)
					}
				}
				stub.logits, stub.features = tc.logits, tc.features
				res, err := step()
				if tc.says == "" {
					if err != nil || res == nil {
						t.Fatalf("%v, %v; want the result", res, err)
					}
					return
				}
				var d *divergedError
				if !errors.As(err, &d) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("err = %v, want %q", err, tc.says)
				}
				if why := d.why(nil); strings.Contains(why, "diverged") != tc.adapted {
					t.Errorf("why %q: want it to say the adaptation diverged: %v", why, tc.adapted)
				}
			})
		}
	}
	// A reset starts the count of steps again.
	stub := &stubMethod{logits: finite, features: finite, steps: 1}
	checked, f := checkFinite(stub, 2)
	checked.Step(nil, 2)
	stub.steps, stub.logits = 0, withNaN
	checked.Reset()
	_, err := checked.Step(nil, 2)
	var d *divergedError
	if !errors.As(err, &d) || strings.Contains(d.why(nil), "diverged") || f.steps != 0 {
		t.Errorf("after a reset: %v; want the model's own outputs blamed", err)
	}
}
