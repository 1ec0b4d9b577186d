package feature

import (
	"fmt"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// ecalpJSON is tta2.json's ECALP block.
type ecalpJSON struct {
	ECALP struct {
		Config struct {
			Images        []int   `json:"images"`
			KText         int     `json:"k_text"`
			KImage        int     `json:"k_image"`
			Gamma         float64 `json:"gamma"`
			Alpha         float64 `json:"alpha"`
			NumIterations int     `json:"num_iterations"`
		} `json:"config"`
		PerStep []struct {
			Step          int   `json:"step"`
			Pred          int   `json:"pred"`
			RowsDiffering []int `json:"rows_differing"`
		} `json:"per_step"`
	} `json:"ecalp"`
}

// ecalpFixture opens tta2's ECALP run: its config, stream features (one
// row per step) and head.
func ecalpFixture(t *testing.T) (*fxt.File, ecalpJSON, ECALPConfig, *mat.Dense, *mat.Dense) {
	t.Helper()
	var js ecalpJSON
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.ECALP.Config
	cfg := ECALPConfig{KText: c.KText, KImage: c.KImage, Gamma: c.Gamma, Alpha: c.Alpha, Iterations: c.NumIterations}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	return x, js, cfg, x.Dense("ecalp.features"), x.Dense("ecalp.T")
}

// ecalpTol: the fixture is fp32 torch and this port float64. Similarities
// and W̃ are sums of d products of unit-norm values, held to the README's
// 1e-5 relative to each tensor's max; the label matrices (tta2.json
// tolerances: ecalp_label_matrices) likewise.
const ecalpTol = 1e-5

// TestECALPFixture replays tta2's ECALP stream and compares, at every step,
// the incrementally kept neighbour lists (indices exactly, similarities
// before the power γ), W̃, the prior, every propagation iterate, the next
// prior and the prediction.
func TestECALPFixture(t *testing.T) {
	x, js, cfg, feats, text := ecalpFixture(t)
	g, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fxt.Compare(t, "ecalp.w", g.w, x.Vec("ecalp.w"), ecalpTol, fxt.Rel)
	steps, _ := feats.Dims()
	if len(js.ECALP.PerStep) != steps {
		t.Fatalf("tta2.json: %d steps for %d features", len(js.ECALP.PerStep), steps)
	}
	c, _ := text.Dims()
	wantPred := x.Ints("ecalp.pred")
	var preds []int
	var differing int
	for i := range steps {
		var tr ecalpTrace
		res, err := g.step(feats.RawRowView(i), &tr)
		if err != nil {
			t.Fatal(err)
		}
		preds = append(preds, res.Pred)
		differing += len(js.ECALP.PerStep[i].RowsDiffering)
		p := fmt.Sprintf("ecalp.s%d.", i)
		knn := x.Ints(p + "knn")
		simWant := x.Dense(p + "sim")
		rows, width := simWant.Dims()
		if rows != c+len(tr.images) {
			t.Fatalf("%sknn: %d rows, the graph has %d nodes", p, rows, c+len(tr.images))
		}
		// Our lists in the fixture's layout: text rows −1/0; image rows the
		// image neighbours (node index, offset by C) then the classes.
		gotIdx := slices.Repeat([]int{-1}, c*width)
		gotSim := mat.NewDense(rows, width, nil)
		for r := range tr.images {
			im, tx := tr.images[r], tr.texts[r]
			if len(im.Index)+len(tx.Index) != width {
				t.Fatalf("%sknn: width %d, our row %d has %d+%d neighbours", p, width, r, len(im.Index), len(tx.Index))
			}
			for j, q := range im.Index {
				gotIdx = append(gotIdx, c+q)
				gotSim.Set(c+r, j, im.Sim[j])
			}
			for j, k := range tx.Index {
				gotIdx = append(gotIdx, k)
				gotSim.Set(c+r, len(im.Index)+j, tx.Sim[j])
			}
		}
		fxt.CompareInts(t, p+"knn", gotIdx, knn)
		fxt.CompareDense(t, p+"sim", gotSim, simWant, ecalpTol, fxt.Rel)
		fxt.CompareDense(t, p+"W_tilde", tr.wTilde, x.Dense(p+"W_tilde"), ecalpTol, fxt.Rel)
		fxt.CompareDense(t, p+"prior_in", tr.priorIn, x.Dense(p+"prior_in"), ecalpTol, fxt.Rel)
		for it, y := range tr.iterates {
			name := fmt.Sprintf("%sY_iter%d", p, it+1)
			fxt.CompareDense(t, name, y, x.Dense(name), ecalpTol, fxt.Rel)
		}
		fxt.CompareDense(t, p+"prior_out", tr.priorOut, x.Dense(p+"prior_out"), ecalpTol, fxt.Rel)
	}
	fxt.CompareInts(t, "ecalp.pred", preds, wantPred)
	t.Logf("%d image rows over the stream differ from a from-scratch k-NN (tta2.json); all lists above matched the incremental ones", differing)
}
