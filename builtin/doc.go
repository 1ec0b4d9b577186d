// Package builtin holds what subtta runs with when it is given nothing: a
// small CLIP trained from scratch on CIFAR-10 by package pretrain, 2,000
// CIFAR-10 test images to evaluate it on, and the frost overlays of the
// frost corruption, all embedded in the binary with go:embed. With them,
// `subtta eval` builds CIFAR-10-C at severity 5 on the fly with no file and
// no network, and `subtta classify IMAGE` answers with CIFAR-10's classes.
//
// The model (MODEL.md: how it was trained, its accuracy curve) is a
// zstd-compressed safetensors file with OpenAI tensor names and its
// configuration in the metadata, so clip.Load reads the same file written
// to disk. Its text tower reads byte-level tokens (textenc.ByteTokenizer).
//
// The data's sources and licences are in DATA.md and frost/LICENSE.
package builtin
