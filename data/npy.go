package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// NPY is an open NumPy .npy file (format versions 1, 2 and 3) whose data
// is read lazily from disk: opening a 150 MB CIFAR-10-C file reads only its
// header. Supported dtypes are the integer ones with a byte order Go can
// read without conversion tables: '|u1', '|i1', '<i2', '<u2', '<i4', '<u4',
// '<i8', '<u8' (and '<u1'/'<i1', which some writers use). Arrays must be in
// C order (Fortran order is accepted only for 0- or 1-dimensional arrays,
// where it is the same).
//
// Reads go through io.ReaderAt and are safe for concurrent use.
type NPY struct {
	Path     string
	Dtype    string // the header's descr, e.g. "|u1"
	Shape    []int
	ItemSize int // bytes per element

	f      *os.File
	offset int64 // of the first data byte
	n      int64 // number of elements
}

var npyMagic = []byte("\x93NUMPY")

// OpenNPY opens the .npy file at path and parses its header. It fails,
// naming the file, for a missing or malformed header, an unsupported dtype
// or order, or a file shorter or longer than its header says.
func OpenNPY(path string) (*NPY, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	a, err := parseNPY(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data: %s: %w", path, err)
	}
	a.Path, a.f = path, f
	return a, nil
}

func parseNPY(f *os.File) (*NPY, error) {
	var pre [12]byte
	if _, err := io.ReadFull(f, pre[:10]); err != nil {
		return nil, fmt.Errorf("not a .npy file: %w", err)
	}
	if !bytes.Equal(pre[:6], npyMagic) {
		return nil, errors.New("not a .npy file (bad magic)")
	}
	var hlen, start int
	switch major := pre[6]; major {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(pre[8:10])), 10
	case 2, 3:
		if _, err := io.ReadFull(f, pre[10:12]); err != nil {
			return nil, fmt.Errorf("truncated .npy header: %w", err)
		}
		h := binary.LittleEndian.Uint32(pre[8:12])
		if h > 1<<20 {
			return nil, fmt.Errorf(".npy header length %d is implausible", h)
		}
		hlen, start = int(h), 12
	default:
		return nil, fmt.Errorf("unsupported .npy format version %d.%d", major, pre[7])
	}
	header := make([]byte, hlen)
	if _, err := io.ReadFull(f, header); err != nil {
		return nil, fmt.Errorf("truncated .npy header: %w", err)
	}
	descr, fortran, shape, err := parseNPYHeader(string(header))
	if err != nil {
		return nil, fmt.Errorf(".npy header %q: %w", strings.TrimSpace(string(header)), err)
	}
	size, ok := npyItemSize(descr)
	if !ok {
		return nil, fmt.Errorf("unsupported .npy dtype %q (want an integer type such as '|u1' or '<i8')", descr)
	}
	if fortran && len(shape) > 1 {
		return nil, errors.New(".npy arrays in Fortran order are not supported")
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/int64(size)/int64(d)) {
			return nil, fmt.Errorf("bad .npy shape %v", shape)
		}
		n *= int64(d)
	}
	a := &NPY{Dtype: descr, Shape: shape, ItemSize: size, offset: int64(start + hlen), n: n}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if want := a.offset + n*int64(size); st.Size() != want {
		return nil, fmt.Errorf("file is %d bytes, header (shape %v, dtype %s) needs %d", st.Size(), shape, descr, want)
	}
	return a, nil
}

func npyItemSize(descr string) (int, bool) {
	switch descr {
	case "|u1", "|i1", "<u1", "<i1", "|b1":
		return 1, true
	case "<i2", "<u2":
		return 2, true
	case "<i4", "<u4":
		return 4, true
	case "<i8", "<u8":
		return 8, true
	}
	return 0, false
}

// parseNPYHeader parses the Python dict literal of a .npy header, e.g.
// {'descr': '|u1', 'fortran_order': False, 'shape': (50000, 32, 32, 3), }.
func parseNPYHeader(h string) (descr string, fortran bool, shape []int, err error) {
	p := &pyLiteral{s: h}
	p.space()
	if !p.eat('{') {
		return "", false, nil, errors.New("want a dict")
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return "", false, nil, err
		}
		p.space()
		if !p.eat(':') {
			return "", false, nil, fmt.Errorf("want ':' after %q", key)
		}
		p.space()
		switch key {
		case "descr":
			descr, err = p.str()
		case "fortran_order":
			fortran, err = p.boolean()
		case "shape":
			shape, err = p.tuple()
		default:
			return "", false, nil, fmt.Errorf("unexpected key %q", key)
		}
		if err != nil {
			return "", false, nil, fmt.Errorf("%s: %w", key, err)
		}
		seen[key] = true
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.eat('}') {
				return "", false, nil, errors.New("want ',' or '}'")
			}
			break
		}
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return "", false, nil, fmt.Errorf("missing key %q", k)
		}
	}
	return descr, fortran, shape, nil
}

// pyLiteral scans the few Python literals a .npy header holds.
type pyLiteral struct {
	s string
	i int
}

func (p *pyLiteral) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyLiteral) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLiteral) str() (string, error) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", errors.New("want a string")
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	s := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return s, nil
}

func (p *pyLiteral) boolean() (bool, error) {
	switch {
	case strings.HasPrefix(p.s[p.i:], "True"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "False"):
		p.i += 5
		return false, nil
	}
	return false, errors.New("want True or False")
}

func (p *pyLiteral) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, errors.New("want a tuple")
	}
	shape := []int{}
	for {
		p.space()
		if p.eat(')') {
			return shape, nil
		}
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j < len(p.s) && p.s[j] == 'L' { // Python 2 long
			j++
		}
		d, err := strconv.Atoi(strings.TrimSuffix(p.s[p.i:j], "L"))
		if err != nil {
			return nil, fmt.Errorf("bad dimension %q", p.s[p.i:j])
		}
		shape = append(shape, d)
		p.i = j
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.eat(')') {
				return nil, errors.New("want ',' or ')'")
			}
			return shape, nil
		}
	}
}

// Len returns the number of elements.
func (a *NPY) Len() int64 { return a.n }

// ReadAt reads raw little-endian element bytes into dst, starting at
// element off. It fails if the range passes the end of the array.
func (a *NPY) ReadAt(dst []byte, off int64) error {
	size := int64(a.ItemSize)
	if len(dst)%a.ItemSize != 0 || off < 0 || off > a.n || int64(len(dst))/size > a.n-off {
		return fmt.Errorf("data: %s: read of %d bytes at element %d is outside the %d-element array", a.Path, len(dst), off, a.n)
	}
	if _, err := a.f.ReadAt(dst, a.offset+off*size); err != nil {
		return fmt.Errorf("data: %s: %w", a.Path, err)
	}
	return nil
}

// Ints reads the whole array as ints. It is meant for label arrays.
func (a *NPY) Ints() ([]int, error) {
	if a.n > math.MaxInt32 {
		return nil, fmt.Errorf("data: %s: %d elements is too many to read at once", a.Path, a.n)
	}
	raw := make([]byte, a.n*int64(a.ItemSize))
	if err := a.ReadAt(raw, 0); err != nil {
		return nil, err
	}
	out := make([]int, a.n)
	signed := a.Dtype[1] == 'i'
	for i := range out {
		b := raw[i*a.ItemSize:]
		switch {
		case a.ItemSize == 1 && signed:
			out[i] = int(int8(b[0]))
		case a.ItemSize == 1:
			out[i] = int(b[0])
		case a.ItemSize == 2 && signed:
			out[i] = int(int16(binary.LittleEndian.Uint16(b)))
		case a.ItemSize == 2:
			out[i] = int(binary.LittleEndian.Uint16(b))
		case a.ItemSize == 4 && signed:
			out[i] = int(int32(binary.LittleEndian.Uint32(b)))
		case a.ItemSize == 4:
			out[i] = int(binary.LittleEndian.Uint32(b))
		default:
			v := binary.LittleEndian.Uint64(b)
			if !signed && v > math.MaxInt64 {
				return nil, fmt.Errorf("data: %s: element %d = %d overflows int", a.Path, i, v)
			}
			out[i] = int(int64(v))
		}
	}
	return out, nil
}

// Close closes the file.
func (a *NPY) Close() error { return a.f.Close() }

// WriteNPY writes a version 1.0 .npy file holding raw, the little-endian
// C-order bytes of an array of the given dtype (one OpenNPY supports) and
// shape. It is how a CIFAR-10-C-style corrupted set is saved.
func WriteNPY(w io.Writer, dtype string, shape []int, raw []byte) error {
	size, ok := npyItemSize(dtype)
	if !ok {
		return fmt.Errorf("data: WriteNPY: unsupported dtype %q", dtype)
	}
	header, err := NPYHeader(dtype, shape)
	if err != nil {
		return fmt.Errorf("data: WriteNPY: %w", err)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n*size != len(raw) {
		return fmt.Errorf("data: WriteNPY: shape %v of %s needs %d bytes, have %d", shape, dtype, n*size, len(raw))
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	_, err = w.Write(raw)
	return err
}

// NPYHeader returns the version 1.0 .npy header of a C-order array of the
// given dtype (a NumPy descr such as '<f4', written as given) and shape:
// the magic, the version, the header's length and the dict, padded with
// spaces and a newline so that the data starts at a multiple of 64 bytes,
// as NumPy does. A writer that appends rows (a file of features written in
// batches) writes it first and the data after it.
func NPYHeader(dtype string, shape []int) ([]byte, error) {
	dims := make([]string, len(shape))
	for i, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in shape %v", shape)
		}
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", dtype, tuple)
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	header := dict + strings.Repeat(" ", pad) + "\n"
	if len(header) > math.MaxUint16 {
		return nil, fmt.Errorf("header too long for shape %v", shape)
	}
	out := make([]byte, 10, 10+len(header))
	copy(out, npyMagic)
	out[6], out[7] = 1, 0
	binary.LittleEndian.PutUint16(out[8:], uint16(len(header)))
	return append(out, header...), nil
}
