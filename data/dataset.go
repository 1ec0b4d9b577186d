package data

import (
	"fmt"
	"runtime"
	"sync"
)

// Dataset is a labelled set of images read from disk: CIFAR binaries
// (CIFAR), CIFAR-10-C/CIFAR-100-C arrays (CIFARC), or image-folder trees
// such as ImageNet-C (Folder).
//
// Item and Label are safe for concurrent use, so that several goroutines can
// decode images at once (see ReadBatch). Close releases open files; a
// dataset must not be used after Close.
type Dataset interface {
	// Name identifies the dataset in reports, for example
	// "cifar10-test" or "gaussian_noise/5".
	Name() string
	// Len returns the number of images.
	Len() int
	// Classes returns the class names; labels index into them.
	Classes() []string
	// Label returns the label of image i without reading the image.
	// It panics if i is out of range, as indexing a slice does.
	Label(i int) int
	// Item reads and decodes image i and returns it with its label.
	// The image is newly allocated and belongs to the caller.
	Item(i int) (*RGB, int, error)
	Close() error
}

// ReadBatch reads the images at indices with up to workers goroutines
// (workers ≤ 0 means GOMAXPROCS) and returns them, with their labels, in
// the order of indices. If several images fail, the error of the first of
// them in indices is returned.
func ReadBatch(ds Dataset, indices []int, workers int) ([]*RGB, []int, error) {
	imgs := make([]*RGB, len(indices))
	labels := make([]int, len(indices))
	errs := make([]error, len(indices))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(indices))
	if workers <= 1 {
		for k, i := range indices {
			if imgs[k], labels[k], errs[k] = ds.Item(i); errs[k] != nil {
				return nil, nil, errs[k]
			}
		}
		return imgs, labels, nil
	}
	var (
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				imgs[k], labels[k], errs[k] = ds.Item(indices[k])
			}
		}()
	}
	for k := range indices {
		next <- k
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return imgs, labels, nil
}

// ClassCounts returns the number of images of each class of ds, from its
// labels alone.
func ClassCounts(ds Dataset) []int {
	counts := make([]int, len(ds.Classes()))
	for i := range ds.Len() {
		counts[ds.Label(i)]++
	}
	return counts
}

// checkIndex returns an error naming the dataset if i is not an image index.
func checkIndex(name string, i, n int) error {
	if i < 0 || i >= n {
		return fmt.Errorf("data: %s: image index %d out of range [0, %d)", name, i, n)
	}
	return nil
}

// numericClasses returns the names "0", "1", …, for datasets whose files
// carry no class names.
func numericClasses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}
