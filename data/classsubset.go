package data

import (
	"fmt"
	"slices"
)

// ClassSubset returns a view of the images of ds whose class is one of
// keep (class indices of ds, ascending), in ds's order, relabelled by their
// class's position in keep: Classes() lists the kept names, and label k
// means keep[k]. It reads the labels of ds (Label, no image) once. Closing
// the view closes ds. It panics if keep is not ascending or out of range,
// a programming error.
func ClassSubset(ds Dataset, keep []int) Dataset {
	all := ds.Classes()
	if !slices.IsSorted(keep) || len(keep) == 0 || keep[0] < 0 || keep[len(keep)-1] >= len(all) {
		panic(fmt.Sprintf("data: class subset %v of %d classes", keep, len(all)))
	}
	relabel := make([]int, len(all))
	for i := range relabel {
		relabel[i] = -1
	}
	names := make([]string, len(keep))
	for k, c := range keep {
		relabel[c], names[k] = k, all[c]
	}
	var idx []int
	for i := range ds.Len() {
		if relabel[ds.Label(i)] >= 0 {
			idx = append(idx, i)
		}
	}
	return &classSubset{Dataset: ds, idx: idx, relabel: relabel, names: names}
}

type classSubset struct {
	Dataset
	idx     []int // indices into ds
	relabel []int // ds label → view label, −1 when left out
	names   []string
}

func (s *classSubset) Name() string {
	return fmt.Sprintf("%s (%d classes)", s.Dataset.Name(), len(s.names))
}
func (s *classSubset) Len() int          { return len(s.idx) }
func (s *classSubset) Classes() []string { return s.names }
func (s *classSubset) Label(j int) int   { return s.relabel[s.Dataset.Label(s.idx[j])] }
func (s *classSubset) Item(j int) (*RGB, int, error) {
	img, label, err := s.Dataset.Item(s.idx[j])
	if err != nil {
		return nil, 0, err
	}
	return img, s.relabel[label], nil
}
