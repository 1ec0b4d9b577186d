package pretrain

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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
	// Source says where the images were read from (a path), for messages:
	// a checkpoint records it with the set's identity, which it is no
	// part of.
	Source string
}

// Len returns the number of images.
func (s *Images) Len() int { return len(s.Labels) }

// DataIdentity identifies a training set. A checkpoint records the one it
// was trained on, and a run resumes only on the same: on other images the
// step count, the epochs, the shuffles and the learning-rate schedule
// would silently mean other things.
type DataIdentity struct {
	Images int `json:"images"`
	// SHA256 is the hex SHA-256 of the image size, the class names, the
	// labels and the pixels, in the set's order (the order decides the
	// batches): the same images read from CIFAR-10's binaries or from an
	// image folder are the same set. 0.1–0.18 s for CIFAR-10's 50,000
	// training images (BenchmarkDataIdentity, 2-vCPU EPYC), a fraction of
	// their decoding.
	SHA256 string `json:"sha256"`
	// Source is Images.Source, for messages; it is not compared.
	Source string `json:"source,omitempty"`
}

// Identity returns the identity of the set.
func (s *Images) Identity() DataIdentity {
	h := sha256.New()
	var b [8]byte
	put := func(v int) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	put(s.Size)
	put(len(s.Classes))
	for _, c := range s.Classes {
		put(len(c))
		h.Write([]byte(c))
	}
	put(len(s.Labels))
	lb := make([]byte, 0, 8*len(s.Labels))
	for _, l := range s.Labels {
		lb = binary.LittleEndian.AppendUint64(lb, uint64(l))
	}
	h.Write(lb)
	h.Write(s.Pix)
	return DataIdentity{Images: s.Len(), SHA256: hex.EncodeToString(h.Sum(nil)), Source: s.Source}
}

// Same reports whether d and o identify the same images (their sources
// may differ).
func (d DataIdentity) Same(o DataIdentity) bool { return d.Images == o.Images && d.SHA256 == o.SHA256 }

// String describes the set for messages: the number of images, the
// fingerprint's first 12 digits and the source.
func (d DataIdentity) String() string {
	s := fmt.Sprintf("%d images (sha256 %.12s)", d.Images, d.SHA256)
	if d.Source != "" {
		s += " from " + d.Source
	}
	return s
}

// Image returns image i (sharing Pix).
func (s *Images) Image(i int) *data.RGB {
	n := 3 * s.Size * s.Size
	return &data.RGB{W: s.Size, H: s.Size, Pix: s.Pix[i*n : (i+1)*n]}
}

// LoadImages decodes every image of ds into memory. Every image must be
// size×size (CIFAR's 32×32); progress, if not nil, is called after each
// chunk with the number decoded so far. The set's Source is ds.Name().
func LoadImages(ds data.Dataset, size, workers int, progress func(done, total int)) (*Images, error) {
	return LoadImagesContext(context.Background(), ds, size, workers, progress)
}

// LoadImagesContext is LoadImages, stopping with ctx's error between
// chunks of images once ctx ends.
func LoadImagesContext(ctx context.Context, ds data.Dataset, size, workers int, progress func(done, total int)) (*Images, error) {
	n := ds.Len()
	if n == 0 {
		return nil, fmt.Errorf("pretrain: %s: no images", ds.Name())
	}
	s := &Images{Size: size, Classes: ds.Classes(), Pix: make([]uint8, n*3*size*size), Labels: make([]int, n), Source: ds.Name()}
	const chunk = 1000
	idx := make([]int, 0, chunk)
	for lo := 0; lo < n; lo += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
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
				return nil, fmt.Errorf("pretrain: %s is %d×%d, want %d×%d (every image of the set must be that size)", imageName(ds, i), img.W, img.H, size, size)
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

// imageName names image i of ds for messages: where it is read from when
// ds says (data.Folder's Path), else its place in ds.
func imageName(ds data.Dataset, i int) string {
	if p, ok := ds.(interface{ Path(int) string }); ok {
		return p.Path(i)
	}
	return fmt.Sprintf("%s: image %d of %d", ds.Name(), i+1, ds.Len())
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
