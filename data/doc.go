// Package data turns image files into model inputs: decoding, CLIP's
// preprocessing, the datasets the benchmarks read (CIFAR-10 and CIFAR-100
// binaries, CIFAR-10-C and CIFAR-100-C arrays, image folders such as
// ImageNet and ImageNet-C), and corrupted datasets made with the 15
// corruptions of package corrupt. It knows nothing of the model.
//
// # Image folders
//
// OpenFolder reads an image-folder dataset (<class>/**/<image>, as
// torchvision's ImageFolder) from a directory, a .tar or a .tar.gz. Its
// parts are exported for other readers of image trees, so that they read
// them by the same rules: WalkImages lists a folder's images,
// ImageArchive indexes an archive's (reading a .tar in place, a .tar.gz
// into memory), and ImageRoot finds the folder holding the class folders
// (as test/ in an archive that wraps them). subtta's --images uses them.
//
// # Decoding
//
// ReadRGB and DecodeRGB read PNG, JPEG and GIF files into RGB, an 8-bit
// interleaved (HWC) image, converting every colour model the way Pillow's
// Image.convert("RGB") does (alpha is dropped without premultiplying, grey is
// replicated, 16-bit samples keep their high byte). Corrupt, truncated,
// unsupported or oversized files give an error that names the file.
//
// PNG decoding is exact. JPEG decoding is close to, but not bit-identical
// with, the libjpeg-turbo decoding Pillow uses: chroma is upsampled and
// converted to RGB with libjpeg's arithmetic, but Go's decoder has its own
// inverse DCT. On the reference images (CIFAR-10 test JPEGs and a
// skimage photo) decoded pixels differ by at most 3 levels, 0.05 on
// average, and CLIP's normalised inputs by at most 0.045 (see
// TestJPEGDecodeDifference). GIF transparency is decoded by Go as a
// transparent black palette entry, where Pillow keeps the stored colour.
//
// # Preprocessing
//
// Preprocessor reproduces OpenAI CLIP's transform (Resize(224, BICUBIC),
// CenterCrop(224), ToTensor, Normalize) on a Pillow 9.4 image bit for bit:
// the resize is Pillow's antialiased bicubic convolution with its 22-bit
// fixed-point weights and 8-bit intermediate, the crop offsets round like
// Python, and normalisation is done in float32 in torchvision's order. The
// output is CHW float32 (Transform) or NCHW for a batch (Batch). The size is
// configurable (224 for ViT-B, 64 for small test models), as are the mean
// and standard deviation, and an option reproduces Pillow's premultiplied
// resize of RGBA images that were not converted to RGB first.
//
// # Augmented views
//
// Test-time methods that look at several views of an image get them from
// the raw image, seeded per (seed, domain, image) by ViewRNG:
// Preprocessor.Views gives the base view and random resized crops with
// flips (bit for bit Pillow's bilinear resize for a given crop);
// Preprocessor.AugMixViews gives MEMO's AugMix views, crops mixed in
// [0, 1] with three chains of the nine AugMix operations (AutoContrast,
// Equalize, Posterize, Solarize, Rotate, ShearX, ShearY, TranslateX,
// TranslateY: Pillow's ImageOps tables and bilinear affine transform).
// StrongAugment is RoTTA's strong augmentation of a batch of [0, 1] float
// images, one parameter draw per batch, with torchvision's tensor
// formulas; Normalize and Unnormalize convert between [0, 1] images and
// the model's normalised input. The official random draws (numpy, torch)
// cannot be reproduced: these follow the official distributions and
// per-operation formulas.
//
// # Corrupted data sets
//
// Corrupted corrupts a clean dataset on the fly with one of the 15
// corruptions of package corrupt at one severity; WriteCIFARC and
// WriteImageNetC write such data sets to disk in the official layouts that
// OpenCIFARC and OpenImageNetC read (resumably: complete files are skipped).
// ImageNet images go through make_imagenet_c.py's pipeline: Pillow's
// bilinear Resize(256) (ResizeBilinear, exact like the bicubic one),
// CenterCrop(224), the corruption, and a JPEG of quality 85. Random draws
// come from a seed, per image, corruption and severity, so any image of a
// generated set can be reproduced alone.
package data
