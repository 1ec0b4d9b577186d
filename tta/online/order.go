package online

import (
	"bufio"
	"fmt"
	"io"
	"math/bits"
	"strconv"
)

// pyRandom is CPython's random.Random (MT19937) for integer seeds, enough of
// it to reproduce random.seed(seed); random.shuffle(x), the order the
// official code gives each stream (spec §1.6: Python random, seed 1).
type pyRandom struct {
	mt  [624]uint32
	idx int
}

// newPyRandom seeds like random.seed(seed) for a non-negative int seed:
// init_by_array with the seed's 32-bit words, least significant first.
func newPyRandom(seed uint64) *pyRandom {
	key := []uint32{uint32(seed)}
	if hi := uint32(seed >> 32); hi != 0 {
		key = append(key, hi)
	}
	r := &pyRandom{}
	r.initGenrand(19650218)
	i, j := 1, 0
	for k := max(624, len(key)); k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= 624 {
			r.mt[0] = r.mt[623]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k := 623; k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= 624 {
			r.mt[0] = r.mt[623]
			i = 1
		}
	}
	r.mt[0] = 0x80000000
	r.idx = 624
	return r
}

func (r *pyRandom) initGenrand(s uint32) {
	r.mt[0] = s
	for i := 1; i < 624; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
}

func (r *pyRandom) uint32() uint32 {
	const upper, lower = 0x80000000, 0x7fffffff
	if r.idx >= 624 {
		for k := range 624 {
			y := (r.mt[k] & upper) | (r.mt[(k+1)%624] & lower)
			v := r.mt[(k+397)%624] ^ (y >> 1)
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			r.mt[k] = v
		}
		r.idx = 0
	}
	y := r.mt[r.idx]
	r.idx++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// below is random._randbelow(n) for 0 < n ≤ 2³²: getrandbits(n.bit_length())
// until the value is below n.
func (r *pyRandom) below(n int) int {
	k := bits.Len(uint(n))
	for {
		v := int(r.uint32() >> (32 - k))
		if v < n {
			return v
		}
	}
}

// shuffle is random.shuffle.
func (r *pyRandom) shuffle(x []int) {
	for i := len(x) - 1; i > 0; i-- {
		j := r.below(i + 1)
		x[i], x[j] = x[j], x[i]
	}
}

// PythonShuffle returns 0…n−1 in the order of Python's
// random.seed(seed); l = list(range(n)); random.shuffle(l).
func PythonShuffle(n int, seed uint64) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	newPyRandom(seed).shuffle(out)
	return out
}

// ReadOrder reads an explicit sample order: whitespace-separated
// non-negative integers (one per line, typically).
func ReadOrder(r io.Reader) ([]int, error) {
	sc := bufio.NewScanner(r)
	sc.Split(bufio.ScanWords)
	var out []int
	for sc.Scan() {
		v, err := strconv.Atoi(sc.Text())
		if err != nil || v < 0 {
			return nil, fmt.Errorf("tta: order: entry %d: %q is not a sample index", len(out), sc.Text())
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tta: order: %w", err)
	}
	return out, nil
}
