package autograd

import (
	"errors"
	"fmt"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// DeviceAdam trains float32 parameters with Adam on a device
// (kernel.AdamDevice): their values, their gradients and the optimizer's
// moments are kept there, in one buffer each, so that a step neither
// downloads the gradients nor uploads the parameters. While it is attached
// (Attach to the returned release), the passes on its device read the
// parameters from its buffer (as they would read a resident copy) and
// backward passes there leave the parameters' gradients in its gradient
// buffer instead of downloading them to the tensors.
//
// The host's values are kept equal to the device's: each Step downloads
// the updated values into the tensors (one download of every value), so
// that whatever reads them on the host (a saved state, a CPU pass, a
// stream's values swapped in place by serve) reads the current ones; and
// Attach uploads the tensors whose host values changed since (a reset, a
// restored state), found by comparing them bit for bit with the values
// last synchronised. The moments stay on the device: State downloads them,
// SetState and Reset replace them.
type DeviceAdam struct {
	d     kernel.AdamDevice
	ts    []*smat.Dense[float32]
	off   []int
	n     int
	vals  kernel.Buf
	grads kernel.Buf
	m, v  kernel.Buf
	zeros kernel.Buf // as many zeros as the largest parameter has values

	has    []bool    // a gradient since ZeroGrad
	steps  []int     // each parameter's step count
	shadow []float32 // the device's values, as last synchronised
	synced bool      // shadow holds them (false before the first Attach)
}

// ErrDeviceAdam wraps the errors of a DeviceAdam used out of turn.
var ErrDeviceAdam = errors.New("autograd: DeviceAdam")

// deviceParams are the tensors of the attached DeviceAdams.
var deviceParams struct {
	mu sync.Mutex
	m  map[*smat.Dense[float32]]deviceParam
}

type deviceParam struct {
	a *DeviceAdam
	i int
}

// NewDeviceAdam allocates on d the values, gradients and moments of ts, each
// a float32 matrix of its own. Nothing is uploaded before Attach.
func NewDeviceAdam(d kernel.AdamDevice, ts []smat.Tensor) (*DeviceAdam, error) {
	a := &DeviceAdam{d: d}
	for i, t := range ts {
		dense, ok := t.(*smat.Dense[float32])
		if !ok {
			return nil, fmt.Errorf("%w: parameter %d is %T, want *mat.Dense[float32]", ErrDeviceAdam, i, t)
		}
		a.ts = append(a.ts, dense)
		a.off = append(a.off, a.n)
		a.n += dense.Size()
	}
	a.off = append(a.off, a.n)
	a.has, a.steps = make([]bool, len(ts)), make([]int, len(ts))
	a.shadow = make([]float32, a.n)
	largest := 1
	for i := range a.ts {
		largest = max(largest, a.off[i+1]-a.off[i])
	}
	var err error
	// The values are followed by Step's count of non-finite gradients, so
	// that both come down in one download.
	for _, b := range []struct {
		p *kernel.Buf
		n int
	}{{&a.vals, a.n + 1}, {&a.grads, max(a.n, 1)}, {&a.m, max(a.n, 1)}, {&a.v, max(a.n, 1)}, {&a.zeros, largest}} {
		if *b.p, err = d.Alloc(b.n); err != nil {
			a.Close()
			return nil, err
		}
	}
	if err := d.Upload(a.zeros, make([]float32, largest)); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Device returns the device the parameters are kept on.
func (a *DeviceAdam) Device() kernel.AdamDevice { return a.d }

// Close frees the device's buffers; a second Close does nothing.
func (a *DeviceAdam) Close() {
	for _, b := range []*kernel.Buf{&a.vals, &a.grads, &a.m, &a.v, &a.zeros} {
		if *b != nil {
			a.d.Free(*b)
			*b = nil
		}
	}
}

// part returns parameter i's values of b.
func (a *DeviceAdam) part(b kernel.Buf, i int) kernel.Buf { return b.Slice(a.off[i], a.off[i+1]) }

// Attach uploads the parameters whose host values changed since they were
// last synchronised (all of them the first time) and makes the passes on
// the device read them from the DeviceAdam's buffer and leave their
// gradients there, until release is called. A parameter may be attached to
// one DeviceAdam at a time.
func (a *DeviceAdam) Attach() (release func(), err error) {
	deviceParams.mu.Lock()
	defer deviceParams.mu.Unlock()
	for _, t := range a.ts {
		if _, ok := deviceParams.m[t]; ok {
			return nil, fmt.Errorf("%w: a parameter is attached already", ErrDeviceAdam)
		}
	}
	for i, t := range a.ts {
		host, kept := values[float32](t), a.shadow[a.off[i]:a.off[i+1]]
		if a.synced && equalBits(host, kept) {
			continue
		}
		copy(kept, host)
		if err := a.d.Upload(a.part(a.vals, i), kept); err != nil {
			return nil, err
		}
	}
	a.synced = true
	if deviceParams.m == nil {
		deviceParams.m = make(map[*smat.Dense[float32]]deviceParam)
	}
	for i, t := range a.ts {
		deviceParams.m[t] = deviceParam{a, i}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			deviceParams.mu.Lock()
			defer deviceParams.mu.Unlock()
			for _, t := range a.ts {
				if p, ok := deviceParams.m[t]; ok && p.a == a {
					delete(deviceParams.m, t)
				}
			}
		})
	}, nil
}

// attached returns t's DeviceAdam and index when it is attached on d.
func attached(t smat.Tensor, d kernel.Device) (*DeviceAdam, int, bool) {
	dense, ok := t.(*smat.Dense[float32])
	if !ok {
		return nil, 0, false
	}
	deviceParams.mu.Lock()
	p, ok := deviceParams.m[dense]
	deviceParams.mu.Unlock()
	if !ok || kernel.Device(p.a.d) != d {
		return nil, 0, false
	}
	return p.a, p.i, true
}

// attachedValues returns an attached parameter's values on the run's
// device (devRun.resident), or nil when t is not attached there.
func (r *devRun) attachedValues(t smat.Tensor) kernel.Buf {
	a, i, ok := attached(t, r.d)
	if !ok {
		return nil
	}
	return a.part(a.vals, i)
}

// sinkGrad adds a queued gradient of an attached parameter to its
// DeviceAdam's gradient buffer, on the device, and reports whether it did
// (flushGrads then downloads nothing for it).
func (r *devRun) sinkGrad(p pendingGrad) bool {
	a, i, ok := attached(p.t, r.d)
	if !ok || r.err != nil {
		return false
	}
	src := p.g
	if src == nil {
		src = slice(r.arena[p.chunk], p.off, p.off+p.n)
	}
	dst := a.part(a.grads, i)
	n := a.off[i+1] - a.off[i]
	if p.n != n {
		r.err = fmt.Errorf("%w: a gradient of %d values for a parameter of %d", ErrDeviceAdam, p.n, n)
		return true
	}
	if a.has[i] {
		r.do(func() error { return r.d.Add(dst, dst, src, n) })
	} else {
		r.do(func() error { return r.d.FillRows(dst, 1, n, src) })
		a.has[i] = true
	}
	return true
}

// ZeroGrad forgets the gradients (the tensors' own are the caller's to
// zero).
func (a *DeviceAdam) ZeroGrad() { clear(a.has) }

// HasGrad reports whether parameter i has a gradient on the device or on
// its tensor.
func (a *DeviceAdam) HasGrad(i int) bool { return a.has[i] || a.ts[i].HasGrad() }

// Grads downloads the gradients (nil for a parameter without one), with
// those on the tensors added as Step adds them: for tests.
func (a *DeviceAdam) Grads() ([][]float32, error) {
	if err := a.takeHostGrads(); err != nil {
		return nil, err
	}
	out := make([][]float32, len(a.ts))
	for i := range a.ts {
		if a.has[i] {
			out[i] = make([]float32, a.off[i+1]-a.off[i])
			if err := a.d.Download(out[i], a.part(a.grads, i)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// takeHostGrads adds the gradients that backward left on the tensors (parts
// of a pass that ran on the CPU) to the device's, and zeroes the tensors'.
func (a *DeviceAdam) takeHostGrads() error {
	for i, t := range a.ts {
		if !t.HasGrad() {
			continue
		}
		g := values[float32](t.Grad())
		dst := a.part(a.grads, i)
		if a.has[i] {
			tmp, err := a.d.Alloc(len(g))
			if err != nil {
				return err
			}
			err = a.d.Upload(tmp, g)
			if err == nil {
				err = a.d.Add(dst, dst, tmp, len(g))
			}
			a.d.Free(tmp)
			if err != nil {
				return err
			}
		} else if err := a.d.Upload(dst, g); err != nil {
			return err
		}
		a.has[i] = true
		t.ZeroGrad()
	}
	return nil
}

// Step runs one Adam step on the device for every parameter with a
// gradient, scalars(step) giving the numbers of a parameter's step-th step
// (optim.AdamConfig.Scalars32), and downloads the new values into the
// tensors: the step's one wait for the device. As optim.Adam, it skips the
// whole step, changing nothing, when a gradient is NaN or ±Inf (stepped
// false): the count of such values (kernel.AdamDevice.NonFinite, over every
// gradient, those of parameters without one zeroed) tells the update to do
// nothing, and comes down with the values. Parameters that step together
// at the same count (all of them, in an adaptation step) are updated by
// one kernel.
func (a *DeviceAdam) Step(scalars func(step int) kernel.AdamScalars) (stepped bool, err error) {
	if err := a.takeHostGrads(); err != nil {
		return false, err
	}
	type run struct{ first, end int }
	var runs []run
	for i := range a.ts {
		if !a.has[i] {
			n := a.off[i+1] - a.off[i]
			if err := a.d.FillRows(a.part(a.grads, i), 1, n, a.zeros.Slice(0, n)); err != nil {
				return false, err
			}
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k].end == i && a.steps[runs[k].first] == a.steps[i] {
			runs[k].end = i + 1
		} else {
			runs = append(runs, run{i, i + 1})
		}
	}
	if len(runs) == 0 {
		return true, nil
	}
	flag := a.vals.Slice(a.n, a.n+1)
	if err := a.d.NonFinite(flag, a.grads, a.n); err != nil {
		return false, err
	}
	for _, r := range runs {
		lo, hi := a.off[r.first], a.off[r.end]
		s := scalars(a.steps[r.first] + 1)
		if err := a.d.AdamStep(a.vals.Slice(lo, hi), a.grads.Slice(lo, hi), a.m.Slice(lo, hi), a.v.Slice(lo, hi), hi-lo, s, flag); err != nil {
			return false, err
		}
	}
	got := make([]float32, a.n+1)
	if err := a.d.Download(got, a.vals); err != nil {
		return false, err
	}
	if got[a.n] != 0 {
		return false, nil
	}
	for _, r := range runs {
		for i := r.first; i < r.end; i++ {
			a.steps[i]++
		}
	}
	copy(a.shadow, got)
	for i, t := range a.ts {
		copy(values[float32](t), a.shadow[a.off[i]:a.off[i+1]])
	}
	return true, nil
}

// Reset forgets the moments and step counts, as a fresh optimizer.
func (a *DeviceAdam) Reset() { clear(a.steps) }

// State downloads each parameter's step count and moments (nil for a
// parameter that has not stepped).
func (a *DeviceAdam) State() (steps []int, m, v [][]float32, err error) {
	steps = append([]int(nil), a.steps...)
	m, v = make([][]float32, len(a.ts)), make([][]float32, len(a.ts))
	for i, s := range a.steps {
		if s == 0 {
			continue
		}
		n := a.off[i+1] - a.off[i]
		m[i], v[i] = make([]float32, n), make([]float32, n)
		if err := a.d.Download(m[i], a.part(a.m, i)); err != nil {
			return nil, nil, nil, err
		}
		if err := a.d.Download(v[i], a.part(a.v, i)); err != nil {
			return nil, nil, nil, err
		}
	}
	return steps, m, v, nil
}

// SetState installs step counts and moments (State's form; a parameter
// with step count 0 has none).
func (a *DeviceAdam) SetState(steps []int, m, v [][]float32) error {
	if len(steps) != len(a.ts) || len(m) != len(a.ts) || len(v) != len(a.ts) {
		return fmt.Errorf("%w: state of %d parameters for %d", ErrDeviceAdam, len(steps), len(a.ts))
	}
	for i, s := range steps {
		n := a.off[i+1] - a.off[i]
		if s < 0 || s > 0 && (len(m[i]) != n || len(v[i]) != n) {
			return fmt.Errorf("%w: parameter %d: step %d with moments of %d and %d values, want %d", ErrDeviceAdam, i, s, len(m[i]), len(v[i]), n)
		}
	}
	for i, s := range steps {
		if s == 0 {
			continue
		}
		if err := a.d.Upload(a.part(a.m, i), m[i]); err != nil {
			return err
		}
		if err := a.d.Upload(a.part(a.v, i), v[i]); err != nil {
			return err
		}
	}
	copy(a.steps, steps)
	return nil
}
