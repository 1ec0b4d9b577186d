package data

import (
	"slices"
	"testing"
)

func TestClassSubset(t *testing.T) {
	labels := []int{0, 2, 1, 3, 2, 0, 3, 1, 2}
	ds := &memDataset{name: "m", labels: labels, classes: []string{"a", "b", "c", "d"}}
	for i := range labels {
		ds.imgs = append(ds.imgs, randomRGB(2, 2, uint64(i)))
	}
	for _, tc := range []struct {
		keep    []int
		idx     []int // images of ds kept, in order
		classes []string
	}{
		{[]int{1, 3}, []int{2, 3, 6, 7}, []string{"b", "d"}},
		{[]int{0}, []int{0, 5}, []string{"a"}},
		{[]int{0, 1, 2, 3}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, []string{"a", "b", "c", "d"}},
	} {
		s := ClassSubset(ds, tc.keep)
		if s.Len() != len(tc.idx) || !slices.Equal(s.Classes(), tc.classes) {
			t.Errorf("keep %v: %d images, classes %q", tc.keep, s.Len(), s.Classes())
			continue
		}
		for j, i := range tc.idx {
			img, l, err := s.Item(j)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Index(tc.keep, labels[i])
			if l != want || s.Label(j) != want || !slices.Equal(img.Pix, ds.imgs[i].Pix) {
				t.Errorf("keep %v: image %d: label %d (Label %d), want %d, image of %d", tc.keep, j, l, s.Label(j), want, i)
			}
		}
	}
	for _, bad := range [][]int{nil, {2, 1}, {4}, {-1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("keep %v: no panic", bad)
				}
			}()
			ClassSubset(ds, bad)
		}()
	}
}
