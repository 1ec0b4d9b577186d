package weights

import (
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

// decompressZstd decompresses a whole zstd stream into memory.
func decompressZstd(b []byte) ([]byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDecompressed))
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
