package optim

import (
	"math"
	"testing"
)

// TestConfig checks the torch constructors AdamW and AdamL2 stand for, what
// New builds from a Config, and the names String gives.
func TestConfig(t *testing.T) {
	w := AdamW(1e-3, 0.01)
	want := AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true}
	if w.Adam != want || w.SGD != nil {
		t.Errorf("AdamW(1e-3, 0.01) = %+v, want Adam %+v", w, want)
	}
	l2 := AdamL2(5e-4, 0.01)
	want = AdamConfig{LR: 5e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	if l2.Adam != want || l2.SGD != nil {
		t.Errorf("AdamL2(5e-4, 0.01) = %+v, want Adam %+v", l2, want)
	}
	sgd := Config{SGD: &SGDConfig{LR: 2.5e-4, Momentum: 0.9, Nesterov: true}}
	for _, tc := range []struct {
		cfg  Config
		name string
		typ  any
	}{
		{w, "AdamW(lr=0.001, wd=0.01)", (*Adam[float32])(nil)},
		{l2, "Adam(lr=0.0005, wd=0.01)", (*Adam[float32])(nil)},
		{sgd, "SGD(lr=0.00025, momentum=0.9, nesterov=true, wd=0)", (*SGD[float32])(nil)},
	} {
		if s := tc.cfg.String(); s != tc.name {
			t.Errorf("String() = %q, want %q", s, tc.name)
		}
		opt, err := New[float32](tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch o := opt.(type) {
		case *Adam[float32]:
			if _, ok := tc.typ.(*Adam[float32]); !ok || o.Config != tc.cfg.Adam {
				t.Errorf("%s: New built Adam with %+v", tc.name, o.Config)
			}
		case *SGD[float32]:
			if _, ok := tc.typ.(*SGD[float32]); !ok || o.Config != *tc.cfg.SGD {
				t.Errorf("%s: New built SGD with %+v", tc.name, o.Config)
			}
		default:
			t.Errorf("%s: New built %T", tc.name, opt)
		}
	}
	// An invalid config gives an error and no optimizer at all (not an
	// Optimizer holding a nil pointer).
	for _, bad := range []Config{AdamW(math.NaN(), 0), {SGD: &SGDConfig{LR: 0.1, Nesterov: true}}} {
		if opt, err := New[float64](bad); err == nil || opt != nil {
			t.Errorf("New(%v) = %v, %v; want nil and an error", bad, opt, err)
		}
	}
}
