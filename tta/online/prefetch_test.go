package online

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subtta/subtta/tta"
)

// readDomain is a BatchDomain whose image i is the single value i; it
// signals each batch it has read, by the batch's first index.
type readDomain struct {
	n    int
	mu   sync.Mutex
	read map[int]chan struct{}
}

func (d *readDomain) signal(first int) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.read[first]
	if !ok {
		c = make(chan struct{})
		d.read[first] = c
	}
	return c
}

func (d *readDomain) Name() string { return "read" }
func (d *readDomain) Len() int     { return d.n }
func (d *readDomain) Sample(i int) ([]float32, int, error) {
	return []float32{float32(i)}, i % 2, nil
}
func (d *readDomain) Samples(idx []int, dst []float32) ([]float32, []int, error) {
	labels := make([]int, len(idx))
	for j, i := range idx {
		dst = append(dst, float32(i))
		labels[j] = i % 2
	}
	close(d.signal(idx[0]))
	return dst, labels, nil
}

// waitingMethod steps a batch only once the domain has read the next one
// (the batch whose first sample is next[k] for the k-th step), and records
// the pixels it was given.
type waitingMethod struct {
	recorder
	d    *readDomain
	next []int // the first sample of each batch, in stream order
	seen []float32
	t    *testing.T
}

func (m *waitingMethod) Step(px []float32, n int) (*tta.Result, error) {
	k := len(m.sizes)
	if k+1 < len(m.next) {
		select {
		case <-m.d.signal(m.next[k+1]):
		case <-time.After(30 * time.Second): // reached only when nothing reads ahead
			m.t.Fatalf("batch %d: the next batch was not read while this one was stepped", k)
		}
	}
	m.seen = append(m.seen, px...)
	return m.recorder.Step(px, n)
}

// TestRunnerReadsAhead shows that the runner reads batch b+1 while the
// method steps on batch b (the method waits for that read: a runner that
// reads only when it needs a batch fails after the guard's 30 s), and that
// the method gets the same pixels, in the same order, as before.
func TestRunnerReadsAhead(t *testing.T) {
	const n, bs = 23, 5
	order := PythonShuffle(n, 1)
	var firsts []int
	for s := 0; s < n; s += bs {
		firsts = append(firsts, order[s])
	}
	d := &readDomain{n: n, read: map[int]chan struct{}{}}
	m := &waitingMethod{d: d, next: firsts, t: t}
	r := Runner{Method: m, Config: RunnerConfig{BatchSize: bs, Shuffle: true, Seed: 1}}
	rep, err := r.Run([]Domain{d})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	for j, i := range order {
		want[j] = float32(i)
	}
	if !slices.Equal(m.seen, want) {
		t.Errorf("pixels stepped %v, want %v", m.seen, want)
	}
	if !slices.Equal(m.sizes, []int{5, 5, 5, 5, 3}) || rep.Domains[0].Samples != n {
		t.Errorf("sizes %v, samples %d", m.sizes, rep.Domains[0].Samples)
	}
}
