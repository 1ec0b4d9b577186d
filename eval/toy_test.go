package eval

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/subtta/subtta/tta"
)

// toyName is a method registered by a test only: source's predictions,
// a count of the images seen that survives Reset (carried state) and a
// cost of its own. Nothing in eval names it.
const toyName = "toy-carrier"

const toyCost = 7.5

var registerToy = sync.OnceValue(func() error {
	return tta.Register(tta.Registration{
		Name:    toyName,
		About:   "source's predictions and a count of the images seen, kept through Reset",
		Preset:  func(*tta.Preset) error { return nil },
		Cost:    func(tta.Preset) float64 { return toyCost },
		Carries: func(tta.Preset) bool { return true },
		New: func(m tta.Model, p tta.Preset, h tta.Heads) (tta.Method, error) {
			src, err := tta.Lookup(p.Dataset, "source")
			if err != nil {
				return nil, err
			}
			src.BatchSize = p.BatchSize
			inner, err := src.New(m, h)
			if err != nil {
				return nil, err
			}
			return &toyCarrier{Method: inner}, nil
		},
	})
})

type toyCarrier struct {
	tta.Method
	seen uint64
}

func (t *toyCarrier) Name() string { return toyName }

func (t *toyCarrier) Step(pixels []float32, n int) (*tta.Result, error) {
	t.seen += uint64(n)
	return t.Method.Step(pixels, n)
}

func (t *toyCarrier) MarshalCarried() ([]byte, error) {
	return binary.AppendUvarint(nil, t.seen), nil
}

func (t *toyCarrier) UnmarshalCarried(b []byte) error {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return errors.New("toy: bad carried state")
	}
	t.seen = v
	return nil
}

// TestShardsRegisteredToy registers a method eval has never heard of,
// with a cost and carried state of its own, and checks that the split
// weighs it by its cost and keeps its domains in one shard, and that a
// sharded run of it merges into the single run's records.
func TestShardsRegisteredToy(t *testing.T) {
	if err := registerToy(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, opt := builtinRun(t, filepath.Join(dir, "single"))
	cfg.Methods = []string{"source", toyName, "tent"}
	cfg.Limit = 16
	parts, err := SplitShards(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	domains := len(cfg.Corruptions)
	total := 0.0
	for i, p := range parts {
		total += p.Cost
		n := 0
		for _, u := range p.Units {
			if u.Method == toyName {
				n++
			}
		}
		if n != 0 && n != domains {
			t.Errorf("shard %d holds %d of %s's %d domains, want all or none", i, n, toyName, domains)
		}
	}
	if want := float64(domains) * (tta.CostForward + toyCost + tta.CostForwardBackward); total < want-1e-9 || total > want+1e-9 {
		t.Errorf("total cost %.2f, want %.2f from the registrations' costs", total, want)
	}
	want, got, _ := singleAndMerged(t, cfg, opt, dir, filepath.Join(dir, "merged"))
	if len(got) != len(want) || len(want) != 3*domains {
		t.Fatalf("merged %d records, the single run %d, want %d", len(got), len(want), 3*domains)
	}
	for i := range want {
		if g, w := withoutPerProcess(got[i]), withoutPerProcess(want[i]); !reflect.DeepEqual(g, w) {
			t.Errorf("record %d: merged %+v\nsingle %+v", i, g, w)
		}
	}
}
