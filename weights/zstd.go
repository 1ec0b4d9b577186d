package weights

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

func isZstd(b []byte) bool { return len(b) >= 4 && string(b[:4]) == string(zstdMagic) }

// maxDecompressed bounds what a zstd file may expand to (and the window a
// corrupt frame can ask for).
const maxDecompressed = 64 << 30

// A zstd file may expand to maxRatio times its size, or to smallExpansion
// whatever its size. Weights compress by a few times at most (float bits
// are nearly random); a frame that claims more is a corrupt or hostile file
// (a few kilobytes of run-length blocks can ask for gigabytes) and is
// refused before the memory is taken.
const (
	maxRatio       = 1000
	smallExpansion = 64 << 20
)

// decompressZstd decompresses a whole zstd stream into memory.
func decompressZstd(b []byte) ([]byte, error) {
	limit := min(max(uint64(len(b))*maxRatio, smallExpansion), maxDecompressed)
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(limit))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	defer dec.Close()
	// Presize from the frame header when it gives the size, but never trust
	// it beyond a plausible ratio (a corrupt header could claim anything).
	var hint int
	var h zstd.Header
	if h.Decode(b) == nil && h.HasFCS && h.FrameContentSize <= uint64(len(b))*1024 {
		hint = int(h.FrameContentSize)
	}
	out, err := dec.DecodeAll(b, make([]byte, 0, hint))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, fmt.Errorf("zstd: %d bytes that expand to more than %d MB (%d× their size): a corrupt file, not weights", len(b), limit>>20, limit/uint64(max(len(b), 1)))
	}
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return out, nil
}

// WriteZstd is Write followed by zstd compression: the result is what Open
// reads from a .safetensors.zst file.
func WriteZstd(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	enc, err := zstd.NewWriter(w)
	if err != nil {
		return fmt.Errorf("weights: zstd: %w", err)
	}
	if err := Write(enc, tensors, metadata); err != nil {
		enc.Close()
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("weights: zstd: %w", err)
	}
	return nil
}
