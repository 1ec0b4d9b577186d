package tta

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestRoTTAFixture replays tta2's RoTTA run on the fixture model: the
// stream in its batches, the teacher's logits of every batch (the
// predictions), and at every update the stored strong augmentation of the
// memory (official, rounded to uint8; random parameters cannot be matched)
// in place of a drawn one, the loss, the student's LayerNorms after Adam
// and the teacher's after the EMA. Tolerances, relative to each tensor's
// max: 1e-5 for logits and losses (fp32 forward), 1e-5 for the student
// after Adam's step (its first steps are nearly lr·sign(g)), and 1e-6
// absolute for the teacher, whose ν = 1e-3 blend moves it by about 1e-6.
func TestRoTTAFixture(t *testing.T) {
	var js struct {
		RoTTA struct {
			Config struct {
				Images      []int   `json:"images"`
				BatchSize   int     `json:"batch_size"`
				MemorySize  int     `json:"memory_size"`
				UpdateEvery int     `json:"update_frequency"`
				LambdaT     float64 `json:"lambda_t"`
				LambdaU     float64 `json:"lambda_u"`
				Nu          float64 `json:"nu"`
				Lr          float64 `json:"lr"`
			} `json:"config"`
			Updates []struct {
				MemoryImages []int `json:"memory_images"`
			} `json:"updates"`
		} `json:"rotta"`
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.RoTTA.Config
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	m := fxtmodel.TinyModel(t, false)
	head := x.Dense("text.T")
	classes, _ := head.Dims()
	cfg := RoTTAConfig{
		Memory:      feature.RoTTAMemoryConfig{Capacity: c.MemorySize, Classes: classes, LambdaT: c.LambdaT, LambdaU: c.LambdaU},
		UpdateEvery: c.UpdateEvery, Nu: c.Nu, Optimizer: optim.AdamL2(c.Lr, 0),
	}
	r, err := NewRoTTA(m, head, cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := r.tr.names()
	update := 0
	r.augment = func(batch []float32, n, size int) ([]float32, error) {
		u8, shape, err := x.Uint8(fmt.Sprintf("rotta.u%d.aug_u8", update))
		if err != nil {
			return nil, err
		}
		if shape[0] != n || shape[1] != size {
			t.Fatalf("update %d: %d stored images of %d px, the memory holds %d of %d", update, shape[0], shape[1], n, size)
		}
		out := make([]float32, len(u8))
		plane := size * size
		for i := range n {
			for p := range plane {
				for ch := range 3 {
					out[i*3*plane+ch*plane+p] = float32(u8[(i*plane+p)*3+ch]) / 255
				}
			}
		}
		return out, nil
	}
	px := fxtmodel.Pixels(t, 1)
	n := len(c.Images)
	if len(px) < n {
		t.Skipf("tta_inputs holds %d images, RoTTA's stream %d", len(px), n)
	}
	var preds []int
	for b := 0; b*c.BatchSize < n; b++ {
		var batch []float32
		k := min(c.BatchSize, n-b*c.BatchSize)
		for i := range k {
			batch = append(batch, px[c.Images[b*c.BatchSize+i]]...)
		}
		before := r.seen
		res, err := r.Step(batch, k)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, fmt.Sprintf("rotta.b%d.teacher_logits", b), res.Logits, x.Dense(fmt.Sprintf("rotta.b%d.teacher_logits", b)), 1e-5, fxt.Rel)
		preds = append(preds, res.Preds...)
		if before/c.UpdateEvery != r.seen/c.UpdateEvery {
			u := update
			update++
			fxt.Compare(t, fmt.Sprintf("rotta.u%d.loss", u), []float64{res.Diag.Losses["rotta"]}, x.Vec(fmt.Sprintf("rotta.u%d.loss", u)), 1e-5, fxt.Rel)
			student := r.tr.values()
			for i, p := range names {
				fxt.Compare(t, fmt.Sprintf("rotta.u%d.student.%s", u, p), student[i], x.Vec(fmt.Sprintf("rotta.u%d.student.%s", u, p)), 1e-5, fxt.Rel)
				fxt.Compare(t, fmt.Sprintf("rotta.u%d.teacher.%s", u, p), r.teacher[i], x.Vec(fmt.Sprintf("rotta.u%d.teacher.%s", u, p)), 1e-6, fxt.Abs)
			}
		}
	}
	if update != len(js.RoTTA.Updates) {
		t.Errorf("%d updates, the fixture has %d", update, len(js.RoTTA.Updates))
	}
	fxt.CompareInts(t, "rotta.pred", preds, x.Ints("rotta.pred"))
}
