package pretrain

import (
	"fmt"
	"math/rand/v2"

	"github.com/subtta/subtta/data"
)

// Images is a labelled image set held in memory as 8-bit RGB, all of one
// size: the CIFAR-10 training set is 150 MB this way, and a training step
// then reads no file.
type Images struct {
	Size    int // width and height
	Classes []string
	Pix     []uint8 // image i is Pix[i·3·Size² : (i+1)·3·Size²], HWC
	Labels  []int
}

// Len returns the number of images.
func (s *Images) Len() int { return len(s.Labels) }

// Image returns image i (sharing Pix).
func (s *Images) Image(i int) *data.RGB {
	n := 3 * s.Size * s.Size
	return &data.RGB{W: s.Size, H: s.Size, Pix: s.Pix[i*n : (i+1)*n]}
}

// LoadImages decodes every image of ds into memory. Every image must be
// size×size (CIFAR's 32×32); progress, if not nil, is called after each
// chunk with the number decoded so far.
func LoadImages(ds data.Dataset, size, workers int, progress func(done, total int)) (*Images, error) {
	n := ds.Len()
	if n == 0 {
		return nil, fmt.Errorf("pretrain: %s: no images", ds.Name())
	}
	s := &Images{Size: size, Classes: ds.Classes(), Pix: make([]uint8, n*3*size*size), Labels: make([]int, n)}
	const chunk = 1000
	idx := make([]int, 0, chunk)
	for lo := 0; lo < n; lo += chunk {
		idx = idx[:0]
		for i := lo; i < min(lo+chunk, n); i++ {
			idx = append(idx, i)
		}
		imgs, labels, err := data.ReadBatch(ds, idx, workers)
		if err != nil {
			return nil, fmt.Errorf("pretrain: %w", err)
		}
		for k, img := range imgs {
			i := idx[k]
			if img.W != size || img.H != size {
				return nil, fmt.Errorf("pretrain: %s: image %d is %d×%d, want %d×%d", ds.Name(), i, img.W, img.H, size, size)
			}
			copy(s.Pix[i*3*size*size:], img.Pix)
			s.Labels[i] = labels[k]
		}
		if progress != nil {
			progress(min(lo+chunk, n), n)
		}
	}
	return s, nil
}

// Augment writes into dst (size×size) a random crop of src zero-padded by
// pad pixels on every side (torchvision's RandomCrop(size, padding=pad)),
// mirrored left-right with probability ½ when flip is set.
func Augment(dst, src *data.RGB, pad int, flip bool, r *rand.Rand) {
	size := src.W
	dx, dy := 0, 0
	if pad > 0 {
		dx, dy = r.IntN(2*pad+1)-pad, r.IntN(2*pad+1)-pad
	}
	mirror := flip && r.IntN(2) == 1
	for y := range size {
		sy := y + dy
		row := dst.Pix[3*y*size : 3*(y+1)*size]
		if sy < 0 || sy >= size {
			clear(row)
			continue
		}
		for x := range size {
			sx := x + dx
			if mirror {
				sx = size - 1 - x + dx
			}
			o := row[3*x : 3*x+3]
			if sx < 0 || sx >= size {
				o[0], o[1], o[2] = 0, 0, 0
				continue
			}
			copy(o, src.Pix[3*(sy*size+sx):3*(sy*size+sx)+3])
		}
	}
}
