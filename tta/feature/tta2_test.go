package feature

import (
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// The tta2 fixtures (fixtures README section 7): the multi-view baselines'
// official code run on the tiny CLIP. Every count and shape in the tests
// comes from these files, so the tests hold for any valid fixture set.
const (
	tta2File = "fixtures/tta2.safetensors"
	tta2JSON = "fixtures/tta2.json"
)

// tta2Config is the part of tta2.json the feature tests read.
type tta2Config struct {
	Config struct {
		Pool struct {
			Images []int `json:"images"`
		} `json:"pool"`
		VTE struct {
			Images    []int   `json:"images"`
			Rho       float64 `json:"rho"`
			NSelected int     `json:"n_selected"`
		} `json:"vte"`
		Zero struct {
			Images []int   `json:"images"`
			Gamma  float64 `json:"gamma"`
			NKept  int     `json:"n_kept"`
		} `json:"zero"`
		TPT struct {
			Images    []int   `json:"images"`
			Rho       float64 `json:"rho"`
			NSelected int     `json:"n_selected"`
		} `json:"tpt"`
		DMN struct {
			Images     []int   `json:"images"`
			SelectionP float64 `json:"selection_p"`
			NSelected  int     `json:"n_selected"`
			MemorySize int     `json:"memory_size"`
			Beta       float64 `json:"beta"`
			WeightMem  float64 `json:"weight_mem"`
		} `json:"dmn"`
	} `json:"config"`
	Zero struct {
		PerImage  []zeroCase `json:"per_image"`
		Synthetic []zeroCase `json:"synthetic"`
	} `json:"zero"`
	DMN struct {
		PerImage []struct {
			Image        int    `json:"image"`
			PseudoLabel  int    `json:"pseudo_label"`
			MemoryAction string `json:"memory_action"`
			Pred         int    `json:"pred"`
		} `json:"per_image"`
	} `json:"dmn"`
}

// zeroCase is one entry of tta2.json's zero.per_image or zero.synthetic.
type zeroCase struct {
	Ties            []int   `json:"ties"`
	Kept            []int   `json:"kept"`
	SortedIdx       []int   `json:"sorted_idx"`
	Discarded       []int   `json:"discarded_views_in_order"`
	DiscardedArgmax []int   `json:"discarded_argmax"`
	ResolvedBy      string  `json:"resolved_by"`
	Pred            int     `json:"pred"`
	MinTop2Gap      float64 `json:"min_top2_gap_kept"`
	FallbackReturns *int    `json:"fallback_returns"`
	FallbackIntends *int    `json:"fallback_intended"`
}

func readTTA2(t *testing.T) (*fxt.File, *tta2Config) {
	t.Helper()
	x := fxt.Open(t, tta2File)
	var cfg tta2Config
	fixturefile.ReadJSON(t, tta2JSON, &cfg)
	return x, &cfg
}

// slice returns x's tensor name at leading index i and the shape of that
// slice.
func slice(x *fxt.File, name string, i int) ([]float64, []int) {
	x.TB.Helper()
	v, shape := x.F64(name)
	if len(shape) < 1 || i < 0 || i >= shape[0] {
		x.TB.Fatalf("%s: shape %v has no index %d", name, shape, i)
	}
	n := len(v) / shape[0]
	return v[i*n : (i+1)*n], shape[1:]
}

// sliceDense returns x's tensor name (a stack of matrices) at leading
// index i.
func sliceDense(x *fxt.File, name string, i int) *mat.Dense {
	x.TB.Helper()
	v, shape := slice(x, name, i)
	if len(shape) != 2 {
		x.TB.Fatalf("%s[%d]: shape %v, want a matrix", name, i, shape)
	}
	return mat.NewDense(shape[0], shape[1], append([]float64(nil), v...))
}

// sliceInts returns x's integer tensor name at leading index i.
func sliceInts(x *fxt.File, name string, i int) []int {
	x.TB.Helper()
	all := x.Ints(name)
	info, ok := x.Info(name)
	if !ok || len(info.Shape) < 1 || i >= info.Shape[0] {
		x.TB.Fatalf("%s: no index %d", name, i)
	}
	n := len(all) / info.Shape[0]
	return all[i*n : (i+1)*n]
}

// poolFeatures returns stream image img's view features from the view
// pool: name is views.image_features (encode_image output, V×d) or views.f
// (the same, normalised).
func poolFeatures(x *fxt.File, cfg *tta2Config, name string, img int) *mat.Dense {
	x.TB.Helper()
	for k, p := range cfg.Config.Pool.Images {
		if p == img {
			return sliceDense(x, name, k)
		}
	}
	x.TB.Fatalf("image %d is not in the view pool %v", img, cfg.Config.Pool.Images)
	return nil
}
