package fixturefile

import (
	"strings"
	"testing"

	"github.com/subtta/subtta/optim"
)

// Optimizer is an optimizer's settings as the fixtures' JSON files record
// them (torch.optim's names).
type Optimizer struct {
	Optimizer   string    `json:"optimizer"`
	LR          float64   `json:"lr"`
	WeightDecay float64   `json:"weight_decay"`
	Betas       []float64 `json:"betas"`
	Eps         float64   `json:"eps"`
}

// Adam returns the settings as an optim.AdamConfig (AdamW: decoupled
// decay), failing tb for another optimizer.
func (o Optimizer) Adam(tb testing.TB) optim.AdamConfig {
	tb.Helper()
	if len(o.Betas) != 2 {
		tb.Fatalf("optimizer config %+v: want two betas", o)
	}
	cfg := optim.AdamConfig{LR: o.LR, Beta1: o.Betas[0], Beta2: o.Betas[1], Eps: o.Eps, WeightDecay: o.WeightDecay}
	switch {
	case o.Optimizer == "AdamW":
		cfg.Decoupled = true
	case strings.HasPrefix(o.Optimizer, "Adam"):
	default:
		tb.Fatalf("optimizer %q is not Adam or AdamW", o.Optimizer)
	}
	return cfg
}

// AdamState reads Adam's moments of the named parameters,
// <prefix>exp_avg.<name> and <prefix>exp_avg_sq.<name>, at step.
func AdamState[T optim.Float](x *File, prefix string, names []string, step int) optim.State[T] {
	x.TB.Helper()
	st := optim.State[T]{}
	for _, p := range names {
		st[p] = optim.ParamState[T]{Step: step, Buffers: map[string][]T{
			optim.BufExpAvg:   Load[T](x, prefix+optim.BufExpAvg+"."+p),
			optim.BufExpAvgSq: Load[T](x, prefix+optim.BufExpAvgSq+"."+p),
		}}
	}
	return st
}
