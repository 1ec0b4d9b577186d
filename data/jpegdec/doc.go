// Package jpegdec is a fast decoder for the common kind of JPEG file
// (baseline and extended-sequential 8-bit Huffman-coded, one interleaved
// scan) that returns exactly the image the standard library's image/jpeg
// returns for the same bytes.
//
// # What it decodes
//
// Decode handles SOF0 (baseline) and SOF1 (extended sequential, 8-bit
// samples, Huffman coding) frames with
//   - one component (grey), decoded to *image.Gray, or
//   - three components (YCbCr) whose chroma components are both sampled
//     1×1, or both as the luma component, with luma sampled 1×1, 2×1, 1×2
//     or 2×2: the 4:4:4, 4:2:2, 4:4:0 and 4:2:0 ratios, decoded to
//     *image.YCbCr;
//
// all of it in one scan that holds every component, with or without
// restart intervals, followed by the EOI marker.
//
// # What it leaves to image/jpeg
//
// Everything else makes Decode return an error, and the caller decodes
// the file with image/jpeg instead: progressive (SOF2), lossless and
// arithmetic-coded frames, 12-bit samples, CMYK and YCbCrK files, files
// image/jpeg converts to RGBA (Adobe APP14 present, or components named
// R, G, B), other sampling ratios, several scans, restart markers that are
// not exactly where they belong, progressive end-of-band runs inside a
// sequential scan, invalid Huffman tables, any marker between the scan and
// EOI other than RST, truncated or corrupt entropy data, and every other
// malformed input. ErrUnsupported marks a well-formed file of a kind this
// package does not decode; other errors mark a file it found malformed.
// Decode never guesses: where image/jpeg's behaviour on odd input is its
// own (it skips garbage between segments, resynchronises on misplaced
// restart markers, accepts end-of-band runs in sequential scans), this
// package either does the same or declines.
//
// # Bit-identity
//
// When Decode succeeds, its image equals image/jpeg.Decode's for the same
// bytes: same type, bounds, subsampling ratio and strides, and the same
// samples, including those of the padding blocks beyond the visible
// rectangle. Huffman decoding and dequantisation are exact; the inverse
// DCT does image/jpeg's fixed-point integer arithmetic (int32, wrapping
// as Go's int32 does, with its shifts in the same places), and the output
// is level-shifted and clamped as image/jpeg does. The tests compare the
// two decoders sample by sample on every JPEG of the shared fixtures and
// assets (including hundreds of CIFAR-10 archive members), on JPEGs made
// by image/jpeg's encoder at several sizes and qualities, on ImageNet-C
// JPEGs, on files with 4:4:4, 4:2:2, 4:4:0 and 4:2:0 sampling and restart
// intervals written by a small encoder in the tests, on truncated and
// byte-flipped files, and under a fuzz test.
//
// It is two to three times faster than image/jpeg (`go test -bench
// Decode ./data/jpegdec`, which times both on the same files): it reads the
// entropy-coded data through a 64-bit bit buffer refilled up to eight
// bytes at a time, decodes Huffman codes of up to 10 bits with one table
// look-up (for AC coefficients, the code and the value's bits together),
// extends signs without branches, works on the byte slice instead of an
// io.Reader, and skips the inverse DCT's arithmetic for rows, columns and
// blocks whose AC coefficients are all zero (where its result is known
// exactly).
package jpegdec
