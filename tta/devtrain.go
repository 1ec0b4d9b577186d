package tta

import (
	"fmt"
	"runtime"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/optim"
)

// attach moves the optimizer onto the device set by autograd.SetDevice for
// one step of a method (SubTTA's, TENT's, BATCLIP's; the part of a step
// where the host writes no value for MEMO, RoTTA and WATT), when that device runs Adam
// (kernel.AdamDevice) and the trainer is float32 with Adam or AdamW: the
// LayerNorm values, their gradients and the moments then stay there
// (autograd.DeviceAdam), the backward passes leave the gradients there and
// step runs there, downloading only the new values. The moments stay on the
// device between steps; optState, setState and resetOptimizer reach them
// there. Without such a device, or after it changed, the state comes back
// to the host optimizer. release ends the step's attachment; the host
// values must not be written before it.
func (tr *lnTrainer[T]) attach() (release func(), err error) {
	d, ok := autograd.CurrentDevice().(kernel.AdamDevice)
	_, adam := any(tr.opt).(*optim.Adam[float32])
	if tr.dev != nil && (!ok || !adam || tr.dev.Device() != d) {
		if err := tr.toHost(); err != nil {
			return nil, err
		}
	}
	if !ok || !adam {
		return func() {}, nil
	}
	if tr.dev == nil {
		ts := make([]smat.Tensor, len(tr.mats))
		for i, m := range tr.mats {
			ts[i] = m
		}
		dev, err := autograd.NewDeviceAdam(d, ts)
		if err != nil {
			return nil, fmt.Errorf("tta: the optimizer on %s: %w", d.Name(), err)
		}
		steps, m, v := tr.splitState(tr.opt.State())
		if err := dev.SetState(steps, m, v); err != nil {
			dev.Close()
			return nil, fmt.Errorf("tta: the optimizer on %s: %w", d.Name(), err)
		}
		tr.dev = dev
		// The device's buffers go with the trainer (or with toHost).
		runtime.AddCleanup(tr, func(d *autograd.DeviceAdam) { d.Close() }, dev)
	}
	rel, err := tr.dev.Attach()
	if err != nil {
		return nil, fmt.Errorf("tta: the optimizer on %s: %w", d.Name(), err)
	}
	tr.attached = true
	return func() {
		tr.attached = false
		rel()
	}, nil
}

// toHost brings the moments from the device into the host optimizer and
// frees the device's copy.
func (tr *lnTrainer[T]) toHost() error {
	st, err := tr.devState()
	if err != nil {
		return err
	}
	if err := tr.opt.SetState(st); err != nil {
		return err
	}
	tr.dev.Close()
	tr.dev = nil
	return nil
}

// devState downloads the device optimizer's state, in the form of the
// host optimizer's.
func (tr *lnTrainer[T]) devState() (optim.State[T], error) {
	steps, m, v, err := tr.dev.State()
	if err != nil {
		return nil, fmt.Errorf("tta: the optimizer's state from %s: %w", tr.dev.Device().Name(), err)
	}
	st := optim.State[T]{}
	for i, s := range steps {
		if s == 0 {
			continue
		}
		st[tr.params[i].Name] = optim.ParamState[T]{Step: s, Buffers: map[string][]T{
			optim.BufExpAvg: toT[T](m[i]), optim.BufExpAvgSq: toT[T](v[i])}}
	}
	return st, nil
}

// splitState is st in DeviceAdam's form: step counts and moments in the
// parameters' order.
func (tr *lnTrainer[T]) splitState(st optim.State[T]) (steps []int, m, v [][]float32) {
	steps, m, v = make([]int, len(tr.params)), make([][]float32, len(tr.params)), make([][]float32, len(tr.params))
	for i, p := range tr.params {
		ps, ok := st[p.Name]
		if !ok {
			continue
		}
		steps[i], m[i], v[i] = ps.Step, toT[float32](ps.Buffers[optim.BufExpAvg]), toT[float32](ps.Buffers[optim.BufExpAvgSq])
	}
	return steps, m, v
}

// devStep is step on the device.
func (tr *lnTrainer[T]) devStep() (bool, error) {
	cfg := any(tr.opt).(*optim.Adam[float32]).Config
	stepped, err := tr.dev.Step(cfg.Scalars32)
	if err != nil {
		return false, fmt.Errorf("tta: optimizer step on %s: %w", tr.dev.Device().Name(), err)
	}
	if !stepped {
		tr.devSkipped++
	}
	return stepped, nil
}

func toT[T, S optim.Float](s []S) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, x := range s {
		out[i] = T(x)
	}
	return out
}
