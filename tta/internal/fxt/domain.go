package fxt

import "math/rand/v2"

// RandomDomain is a synthetic domain of random images.
// RandomDomain is a test domain of random images and labels.
type RandomDomain struct {
	name   string
	pixels [][]float32
	labels []int
}

// NewRandomDomain returns n random images of size values with labels below classes.
func NewRandomDomain(name string, n, size, classes int, rng *rand.Rand) *RandomDomain {
	d := &RandomDomain{name: name}
	shift := float32(len(name)) * 0.1 // a per-domain "corruption"
	for range n {
		px := make([]float32, size)
		for i := range px {
			px[i] = float32(rng.NormFloat64()) + shift
		}
		d.pixels = append(d.pixels, px)
		d.labels = append(d.labels, rng.IntN(classes))
	}
	return d
}

func (d *RandomDomain) Name() string { return d.name }
func (d *RandomDomain) Len() int     { return len(d.pixels) }
func (d *RandomDomain) Sample(i int) ([]float32, int, error) {
	return d.pixels[i], d.labels[i], nil
}

// NewDomain returns a domain of the given images and labels.
func NewDomain(name string, pixels [][]float32, labels []int) *RandomDomain {
	return &RandomDomain{name: name, pixels: pixels, labels: labels}
}
