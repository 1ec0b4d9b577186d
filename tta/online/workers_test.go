package online

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// reusingMethod returns random features, predictions and losses for each
// batch in the same buffers, overwritten by its next step, as a method
// that reuses its buffers does; its state is the number of steps since
// its last Reset (8 bytes). badPred, when positive, is a prediction it
// makes in batch badBatch: a class the head does not have.
type reusingMethod struct {
	rng      *rand.Rand
	classes  int
	f        *mat.Dense
	preds    []int
	losses   map[string]float64
	steps    uint64
	stepped  int // in all, for the tests
	badBatch int
	badPred  int
}

func newReusingMethod(seed uint64, n, d, classes int) *reusingMethod {
	return &reusingMethod{rng: rand.New(rand.NewPCG(seed, 1)), classes: classes,
		f: mat.NewDense(n, d, nil), preds: make([]int, n), losses: map[string]float64{}, badBatch: -1}
}

func (m *reusingMethod) Name() string       { return "reusing" }
func (m *reusingMethod) Reset() error       { m.steps = 0; return nil }
func (m *reusingMethod) ResetSample() error { return nil }
func (m *reusingMethod) Step(px []float32, n int) (*tta.Result, error) {
	raw := m.f.RawMatrix()
	for i := range raw.Data {
		raw.Data[i] = m.rng.NormFloat64()
	}
	for i := range m.preds {
		m.preds[i] = m.rng.IntN(m.classes)
	}
	if int(m.steps) == m.badBatch {
		m.preds[0] = m.badPred
	}
	m.losses["tent"] = m.rng.Float64()
	m.steps++
	m.stepped++
	f := m.f.Slice(0, n, 0, raw.Cols).(*mat.Dense)
	return &tta.Result{Features: f, Preds: m.preds[:n], Diag: tta.Diagnostics{Losses: m.losses, Steps: int(m.steps)}}, nil
}
func (m *reusingMethod) MarshalBinary() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, m.steps), nil
}
func (m *reusingMethod) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return errors.New("reusing: bad state")
	}
	m.steps = binary.LittleEndian.Uint64(b)
	return nil
}
func (m *reusingMethod) MarshalCarried() ([]byte, error) { return nil, nil }
func (m *reusingMethod) UnmarshalCarried([]byte) error   { return nil }

// workerFixture is a text subspace and head (40 classes, 32 dims) and two
// domains of 23 and 17 images with random labels.
func workerFixture(t testing.TB) (*feature.TextSubspace, *mat.Dense, []Domain) {
	rng := rand.New(rand.NewPCG(3, 4))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 40, 32, 1))
	ts, err := feature.NewTextSubspace(head, feature.SubspaceOptions{Rank: 12})
	if err != nil {
		t.Fatal(err)
	}
	var domains []Domain
	for i, n := range []int{23, 17} {
		labels := make([]int, n)
		for j := range labels {
			labels[j] = rng.IntN(40)
		}
		domains = append(domains, fxt.NewDomain(fmt.Sprint("d", i), make([][]float32, n), labels))
	}
	return ts, head, domains
}

// logLines runs the reusing method over the fixture with the given
// workers and returns the log's lines with their timings cleared.
func logLines(t *testing.T, workers int, proto Protocol) []string {
	ts, head, domains := workerFixture(t)
	var log bytes.Buffer
	r := Runner{Method: newReusingMethod(1, 4, 32, 40), Config: RunnerConfig{Protocol: proto, BatchSize: 4, Text: ts, Head: head, Log: &log, DiagnosticWorkers: workers}}
	if _, err := r.Run(domains); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec BatchRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		rec.Seconds = 0
		b, _ := json.Marshal(rec)
		lines = append(lines, string(b))
	}
	return lines
}

// TestDiagnosticWorkersSameLog: the batch log is the same, diagnostics
// and all, to the last bit (JSON writes float64s exactly), with the
// diagnostics computed inline and by 1, 2 or 3 workers, for a method that
// overwrites its features, predictions and losses in its next step.
func TestDiagnosticWorkersSameLog(t *testing.T) {
	for _, proto := range []Protocol{ResetEachDomain, Mixed} {
		want := logLines(t, -1, proto)
		if n := len(want); n != 6+5 && n != 10 {
			t.Fatalf("%v: %d lines", proto, n)
		}
		if !strings.Contains(want[0], "principal_cosines") || !strings.Contains(want[0], "true_class_cosine") {
			t.Fatalf("%v: no diagnostics in %s", proto, want[0])
		}
		for _, workers := range []int{1, 2, 3, 0} {
			got := logLines(t, workers, proto)
			if !slices.Equal(got, want) {
				t.Errorf("%v, %d workers: the log differs from the inline one's\n got %q\nwant %q", proto, workers, got, want)
			}
		}
	}
}

// TestDiagnosticWorkersState: the state handed on with a record is the
// method's right after that batch's step, however many batches it has
// stepped since; and when OnBatch stops the run, the records of the
// batches already stepped are still handed on, the last with its state
// (the method having stepped no further), and Run returns OnBatch's error.
func TestDiagnosticWorkersState(t *testing.T) {
	ts, head, domains := workerFixture(t)
	errStop := errors.New("stop")
	for _, workers := range []int{-1, 1, 2, 3} {
		lag := max(workers, 0)
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			// Every batch's state: the steps since the domain's reset.
			m := newReusingMethod(1, 4, 32, 40)
			var got []string
			r := Runner{Method: m, Config: RunnerConfig{BatchSize: 4, Text: ts, Head: head, DiagnosticWorkers: workers,
				SaveState: func(string, int) bool { return true },
				OnBatch: func(b BatchRecord) error {
					st, err := b.State()
					if err != nil || len(st) != 8 || binary.LittleEndian.Uint64(st) != uint64(b.Batch+1) || b.Steps != b.Batch+1 {
						got = append(got, fmt.Sprintf("%s batch %d: state %v (%v), steps %d", b.Stream, b.Batch, st, err, b.Steps))
					}
					return nil
				}}}
			if _, err := r.Run(domains); err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 {
				t.Errorf("states not of their batch:\n%s", strings.Join(got, "\n"))
			}

			// Stopped at batch 1 of d1 (of 5), no state saved at a step
			// before: the last batch stepped has its state, none before.
			m = newReusingMethod(1, 4, 32, 40)
			stopping := false
			var batches []int
			var states [][]byte
			r.Method = m
			r.Config.SaveState = func(string, int) bool { return stopping }
			r.Config.OnBatch = func(b BatchRecord) error {
				if b.Stream != "d1" {
					return nil
				}
				st, err := b.State()
				if err != nil {
					t.Error(err)
				}
				batches, states = append(batches, b.Batch), append(states, st)
				if b.Batch == 1 || stopping {
					stopping = true
					return errStop
				}
				return nil
			}
			_, err := r.Run(domains)
			if !errors.Is(err, errStop) {
				t.Fatalf("err = %v, want OnBatch's", err)
			}
			last := 1 + lag
			if want := 6 + last + 1; m.stepped != want {
				t.Errorf("%d steps, want %d", m.stepped, want)
			}
			for i, b := range batches {
				want := []byte(nil)
				if b == last || lag == 0 { // inline, no step since any
					want = binary.LittleEndian.AppendUint64(nil, uint64(b+1))
				}
				if b != i || !bytes.Equal(states[i], want) {
					t.Errorf("record %d: batch %d, state %v; want batch %d, state %v", i, b, states[i], i, want)
				}
			}
			if len(batches) != last+1 {
				t.Errorf("batches %v handed on, want 0…%d", batches, last)
			}
		})
	}
}

// panicMatrix is a head whose rows cannot be read.
type panicMatrix struct{ r, c int }

func (p panicMatrix) Dims() (int, int)    { return p.r, p.c }
func (p panicMatrix) At(i, j int) float64 { panic("no rows here") }
func (p panicMatrix) T() mat.Matrix       { return mat.Transpose{Matrix: p} }

// TestDiagnosticWorkersErrors: a batch whose diagnostics fail stops the
// run with an error naming it; the records before it are handed on, none
// after; a panic in a worker becomes such an error; no goroutine is left
// behind by any run.
func TestDiagnosticWorkersErrors(t *testing.T) {
	ts, head, domains := workerFixture(t)
	before := runtime.NumGoroutine()
	for _, workers := range []int{-1, 1, 3} {
		m := newReusingMethod(1, 4, 32, 40)
		m.badBatch, m.badPred = 2, 40
		var batches []int
		r := Runner{Method: m, Config: RunnerConfig{BatchSize: 4, Text: ts, Head: head, DiagnosticWorkers: workers,
			OnBatch: func(b BatchRecord) error { batches = append(batches, b.Batch); return nil }}}
		_, err := r.Run(domains)
		if err == nil || !strings.Contains(err.Error(), "d0: batch 2: diagnostics") || !strings.Contains(err.Error(), "class 40") {
			t.Errorf("%d workers: err = %v, want batch 2's diagnostics' failure", workers, err)
		}
		if !slices.Equal(batches, []int{0, 1}) {
			t.Errorf("%d workers: batches %v handed on, want [0 1]", workers, batches)
		}
		if want := 3 + max(workers, 0); m.stepped != want {
			t.Errorf("%d workers: %d steps, want %d", workers, m.stepped, want)
		}
	}
	for _, workers := range []int{-1, 2} {
		batches := 0
		r := Runner{Method: newReusingMethod(1, 4, 32, 40), Config: RunnerConfig{BatchSize: 4, Head: panicMatrix{40, 32}, DiagnosticWorkers: workers,
			OnBatch: func(BatchRecord) error { batches++; return nil }}}
		_, err := r.Run(domains)
		if !errors.Is(err, errDiagnosticsPanic) || !strings.Contains(err.Error(), "no rows here") || batches != 0 {
			t.Errorf("%d workers: err = %v after %d batches, want the panic as an error before any", workers, err, batches)
		}
	}
	// Runs that end normally and by OnBatch's error.
	for _, stop := range []bool{false, true} {
		r := Runner{Method: newReusingMethod(1, 4, 32, 40), Config: RunnerConfig{BatchSize: 4, Text: ts, DiagnosticWorkers: 4,
			OnBatch: func(b BatchRecord) error {
				if stop {
					return errors.New("stop")
				}
				return nil
			}}}
		r.Run(domains)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the runs, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
