package data

import (
	"slices"
	"testing"
)

func TestSpread(t *testing.T) {
	// Ten images ordered by class, two classes of five.
	ds := &memDataset{name: "sorted", classes: []string{"a", "b"}}
	for i := range 10 {
		ds.imgs = append(ds.imgs, randomRGB(4, 4, uint64(i)))
		ds.labels = append(ds.labels, i/5)
	}
	for _, tc := range []struct {
		n      int
		want   []int // indices into ds
		passes bool  // Spread returns ds itself
	}{
		{4, []int{0, 2, 5, 7}, false},
		{2, []int{0, 5}, false},
		{1, []int{0}, false},
		{10, nil, true},
		{0, nil, true},
		{11, nil, true},
	} {
		v := Spread(ds, tc.n)
		if tc.passes {
			if v != Dataset(ds) {
				t.Errorf("Spread(%d) is a view, want the dataset itself", tc.n)
			}
			continue
		}
		if v.Len() != tc.n {
			t.Fatalf("Spread(%d).Len() = %d", tc.n, v.Len())
		}
		for j, i := range tc.want {
			img, label, err := v.Item(j)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(img.Pix, ds.imgs[i].Pix) || label != ds.labels[i] || v.Label(j) != ds.labels[i] {
				t.Errorf("Spread(%d) image %d: not image %d of the dataset", tc.n, j, i)
			}
		}
	}
	if got := Spread(ds, 2); got.Label(1) != 1 {
		t.Error("a spread of two over two sorted classes does not reach the second class")
	}
	defer func() {
		if recover() == nil {
			t.Error("Label past the view's end did not panic")
		}
	}()
	Spread(ds, 4).Label(4)
}

// TestSpreadFiles: a spread of a folder keeps the paths the ImageNet-C
// writer names its outputs by.
func TestSpreadFiles(t *testing.T) {
	tree := imageNetTree(t)
	n := tree.Len() - 1
	v, ok := Spread(tree, n).(interface{ File(int) string })
	if !ok {
		t.Fatal("a spread of a folder has no File method")
	}
	for j := range n {
		if got, want := v.File(j), tree.File(j*tree.Len()/n); got != want {
			t.Errorf("File(%d) = %q, want %q", j, got, want)
		}
	}
}
