package main

import (
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/vit"
)

// BenchmarkHostShare runs bench's cases (ViT-B/32 with random weights,
// batch 64, 1,000 classes) on devicetest.Null, a device that computes
// nothing: each figure is what the host spends on a pass or a step beside
// the GPU's work (the graph, the uploads' copies into pinned memory, the
// float64 losses, logits and alignment arithmetic between the GPU's
// products), the floor of `bench --device cuda`'s time on this host
// whatever the GPU. The host's share of a GPU figure is this time over
// that figure's time per batch.
//
// Under "graphs/", the forward passes again on devicetest.NullGrapher,
// which records them as package gpu does (autograd.TowerGraphs): the host's
// share of a pass replayed with one launch.
//
//	go test -run '^$' -bench HostShare ./cmd/subtta
func BenchmarkHostShare(b *testing.B) {
	b.Run("ops", func(b *testing.B) { hostShare(b, &devicetest.Null{}, "") })
	b.Run("graphs", func(b *testing.B) { hostShare(b, &devicetest.NullGrapher{}, "forward") })
}

// hostShare runs bench's cases with key (all for "") on d.
func hostShare(b *testing.B, d kernel.Device, key string) {
	cfg := vit.ViTB32()
	m, err := vit.Random(cfg, 1, vit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	autograd.SetDevice(d)
	defer autograd.SetDevice(nil)
	cases, err := benchCases(cfg, m, 64, 1000, kernel.FP32, true)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		if key != "" && c.key != key {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			for range 2 { // the second run records, where d does
				if err := c.warmUp(); err != nil {
					b.Fatal(err)
				}
			}
			if c.finish != nil {
				defer c.finish()
			}
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
			if key != "" && m.Graphs().Replayed == 0 {
				b.Fatalf("no pass replayed: %+v", m.Graphs())
			}
		})
	}
}
