package weights

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// Tensor is a named array to write to a safetensors file.
//
// Data holds the values in row-major order as one of []float32, []float64,
// []int64, []int32, []uint8 or []int8. DType is the element type stored in the
// file: float data ([]float32, []float64) may be stored as F32, F64, F16 or
// BF16 (rounded to nearest, ties to even); integer data must be stored as
// its own type. An empty DType stores the data's own type.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  any
}

// dataType returns the dtype matching t.Data and its length.
func (t *Tensor) dataType() (DType, int, error) {
	switch d := t.Data.(type) {
	case []float32:
		return F32, len(d), nil
	case []float64:
		return F64, len(d), nil
	case []int64:
		return I64, len(d), nil
	case []int32:
		return I32, len(d), nil
	case []uint8:
		return U8, len(d), nil
	case []int8:
		return I8, len(d), nil
	}
	return "", 0, fmt.Errorf("data of type %T: want []float32, []float64, []int64, []int32, []uint8 or []int8", t.Data)
}

// check validates t and returns the stored dtype.
func (t *Tensor) check() (DType, error) {
	src, n, err := t.dataType()
	if err != nil {
		return "", err
	}
	dt := t.DType
	if dt == "" {
		dt = src
	}
	if dt.Size() == 0 {
		return "", fmt.Errorf("unsupported dtype %q", dt)
	}
	if src.IsFloat() != dt.IsFloat() || (!src.IsFloat() && src != dt) {
		return "", fmt.Errorf("cannot store %s data as %s", src, dt)
	}
	count := 1
	for _, s := range t.Shape {
		if s < 0 || (s > 0 && count > math.MaxInt/s) {
			return "", fmt.Errorf("bad shape %v", t.Shape)
		}
		count *= s
	}
	if count != n {
		return "", fmt.Errorf("shape %v holds %d elements, data has %d", t.Shape, count, n)
	}
	return dt, nil
}

// Write writes tensors, in the given order, as a safetensors file with the
// given metadata (may be nil). The JSON header is padded with spaces to a
// multiple of 8 bytes so that the data section is aligned.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	type entry struct {
		DType   DType   `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	// Build the header by hand to keep the tensors in the given order
	// (a JSON object from a map would sort them).
	var hdr strings.Builder
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return fmt.Errorf("weights: metadata: %w", err)
		}
		hdr.WriteString(`"__metadata__":`)
		hdr.Write(m)
	}
	seen := make(map[string]bool, len(tensors))
	dtypes := make([]DType, len(tensors))
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "__metadata__" || t.Name == "" || seen[t.Name] {
			return fmt.Errorf("weights: tensor name %q is empty, reserved or repeated", t.Name)
		}
		seen[t.Name] = true
		dt, err := t.check()
		if err != nil {
			return fmt.Errorf("weights: tensor %q: %w", t.Name, err)
		}
		dtypes[i] = dt
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		_, n, _ := t.dataType()
		size := int64(n) * int64(dt.Size())
		e, _ := json.Marshal(entry{dt, shape, []int64{off, off + size}})
		k, _ := json.Marshal(t.Name)
		if hdr.Len() > 1 {
			hdr.WriteByte(',')
		}
		hdr.Write(k)
		hdr.WriteByte(':')
		hdr.Write(e)
		off += size
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(hdr.Len()))
	bw.Write(n[:])
	bw.WriteString(hdr.String())
	buf := make([]byte, 0, 1<<16)
	for i := range tensors {
		if err := writeData(bw, buf, dtypes[i], tensors[i].Data); err != nil {
			return fmt.Errorf("weights: tensor %q: %w", tensors[i].Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}

// writeData encodes data as dt in chunks through buf.
func writeData(w *bufio.Writer, buf []byte, dt DType, data any) error {
	if littleEndian {
		// Same type on a little-endian host: the memory is the encoding.
		var raw []byte
		switch d := data.(type) {
		case []float32:
			if dt == F32 && len(d) > 0 {
				raw = unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), 4*len(d))
			}
		case []float64:
			if dt == F64 && len(d) > 0 {
				raw = unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), 8*len(d))
			}
		case []int64:
			if len(d) > 0 {
				raw = unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), 8*len(d))
			}
		case []int32:
			if len(d) > 0 {
				raw = unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), 4*len(d))
			}
		}
		if raw != nil {
			_, err := w.Write(raw)
			return err
		}
	}
	switch d := data.(type) {
	case []uint8:
		_, err := w.Write(d)
		return err
	case []int8: // a byte each, two's complement: the encoding on every host
		if len(d) == 0 {
			return nil
		}
		_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), len(d)))
		return err
	}
	size := dt.Size()
	var n int
	switch d := data.(type) {
	case []float32:
		n = len(d)
	case []float64:
		n = len(d)
	case []int64:
		n = len(d)
	case []int32:
		n = len(d)
	}
	const chunk = 1 << 13
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		b := buf[:(hi-lo)*size]
		for i := lo; i < hi; i++ {
			p := b[(i-lo)*size:]
			switch d := data.(type) {
			case []float32:
				putFloat(p, dt, float64(d[i]), d[i])
			case []float64:
				putFloat(p, dt, d[i], float32(d[i]))
			case []int64:
				binary.LittleEndian.PutUint64(p, uint64(d[i]))
			case []int32:
				binary.LittleEndian.PutUint32(p, uint32(d[i]))
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// putFloat encodes one value; v64 is the exact value, v32 its float32
// rounding. F16 and BF16 round from v32: float64 data is rounded twice,
// which can differ from direct rounding by one unit in rare ties.
func putFloat(p []byte, dt DType, v64 float64, v32 float32) {
	switch dt {
	case F64:
		binary.LittleEndian.PutUint64(p, math.Float64bits(v64))
	case F32:
		binary.LittleEndian.PutUint32(p, math.Float32bits(v32))
	case F16:
		binary.LittleEndian.PutUint16(p, Float32ToHalf(v32))
	case BF16:
		binary.LittleEndian.PutUint16(p, Float32ToBFloat16(v32))
	}
}

// WriteFile writes a safetensors file at path, zstd-compressed when the
// name ends in ".zst". It writes to a temporary file in the same directory
// and renames it, so that a reader never sees a partial file. The file is
// readable by all (mode 0644), as a file written in one go would be; path
// must not be a directory.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	return writeFile(context.Background(), path, tensors, metadata, strings.HasSuffix(path, ".zst"))
}

// WriteFileContext is WriteFile stopped by ctx: once ctx is done, the
// write stops at its next buffer of data, the temporary file is removed
// and the error wraps ctx.Err(); the file at path is left as it was.
func WriteFileContext(ctx context.Context, path string, tensors []Tensor, metadata map[string]string) error {
	return writeFile(ctx, path, tensors, metadata, strings.HasSuffix(path, ".zst"))
}

func writeFile(ctx context.Context, path string, tensors []Tensor, metadata map[string]string, compress bool) (err error) {
	if st, serr := os.Stat(path); serr == nil && st.IsDir() {
		return fmt.Errorf("weights: %s is a directory: give a file name", path)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("weights: %s not written: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := ctxWriter{ctx, tmp}
	if compress {
		err = WriteZstd(w, tensors, metadata)
	} else {
		err = Write(w, tensors, metadata)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("weights: %s not written: %w", path, cerr)
	}
	if err != nil {
		return fmt.Errorf("%w (writing %s)", err, path)
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes it private
		return fmt.Errorf("weights: %s: %w", path, err)
	}
	// On disk before the rename: a crash after it must not leave path
	// naming a file whose data never reached the disk.
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("weights: %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("weights: %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}

// ctxWriter writes to w until ctx is done, then returns ctx.Err().
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
