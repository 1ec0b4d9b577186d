package data

import "fmt"

// Spread returns a view of n images of ds spread evenly over it: image j of
// the view is image ⌊j·ds.Len()/n⌋ of ds. Image folders and the CIFAR test
// set are often ordered by class, so their first n images may all be of one
// class; a spread keeps the classes in proportion. With n ≤ 0 or
// n ≥ ds.Len() it returns ds itself. The view passes File (the image's path,
// which the ImageNet-C writer names its outputs by) through when ds has it;
// closing the view closes ds.
func Spread(ds Dataset, n int) Dataset {
	if n <= 0 || n >= ds.Len() {
		return ds
	}
	s := spread{ds, n}
	if f, ok := ds.(interface{ File(int) string }); ok {
		return spreadFiles{s, f}
	}
	return s
}

type spread struct {
	Dataset
	n int
}

func (s spread) Name() string { return fmt.Sprintf("%s (%d spread)", s.Dataset.Name(), s.n) }
func (s spread) Len() int     { return s.n }

// index maps image j of the view to ds's index, panicking out of range as
// Label does.
func (s spread) index(j int) int {
	if j < 0 || j >= s.n {
		panic(fmt.Sprintf("data: %s: image %d out of range [0, %d)", s.Name(), j, s.n))
	}
	return j * s.Dataset.Len() / s.n
}

func (s spread) Label(j int) int               { return s.Dataset.Label(s.index(j)) }
func (s spread) Item(j int) (*RGB, int, error) { return s.Dataset.Item(s.index(j)) }

type spreadFiles struct {
	spread
	files interface{ File(int) string }
}

func (s spreadFiles) File(j int) string { return s.files.File(s.index(j)) }
