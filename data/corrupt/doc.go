// Package corrupt implements the 15 common corruptions of CIFAR-10-C and
// ImageNet-C (Hendrycks & Dietterich, hendrycks/robustness make_cifar_c.py
// and make_imagenet_c.py) at severities 1–5, in pure Go.
//
// Apply takes an 8-bit RGB image, a corruption name, a severity and a
// Config whose Preset picks the parameter table (CIFAR for 32×32 images,
// ImageNet for 224×224), and returns what the original code stores:
// np.uint8 of the float result, i.e. clipped and truncated (not rounded).
// For ImageNet-C the dataset file is a JPEG of quality 85 of that array;
// EncodeImageNetC is that separate step.
//
// The corruptions, in the benchmark's order (Names):
//
//	gaussian_noise     x + N(0, c²)
//	shot_noise         Poisson(x·c)/c
//	impulse_noise      salt and pepper: each value becomes 0 or 1 with probability c
//	defocus_blur       correlation with an antialiased disk (OpenCV, reflect-101)
//	glass_blur         Gaussian, local pixel copies from up to δ away, Gaussian again
//	motion_blur        ImageMagick's one-sided Gaussian line blur at an angle in U(−45°, 45°)
//	zoom_blur          mean of the image and its centre zooms (scipy order-1 zoom)
//	snow               zoomed, thresholded, motion-blurred noise over a brightened image
//	frost              blend with a random crop of a frost photograph (Config.FrostDir)
//	fog                diamond-square plasma added and rescaled
//	brightness         V + c in HSV (skimage)
//	contrast           (x − mean)·c + mean per channel
//	elastic_transform  random affine warp, then smoothed random displacements
//	pixelate           Pillow BOX resize down to int(S·c) and back
//	jpeg_compression   JPEG round trip at a low quality (Go's image/jpeg)
//
// # Randomness and seeding
//
// Random corruptions draw from a Source, one number at a time, in the order
// in which the numpy original consumed numpy's global RandomState (arrays in
// C order, calls in program order). Replay feeds recorded numpy draws and
// so reproduces the original outputs; PCG (math/rand/v2) generates new
// data. NewSource derives the stream of one (image index, corruption,
// severity) of a data set from its seed as PCG(seed, image<<16 | k<<8 |
// severity), k being the corruption's index in Names, so a result never
// depends on what else was generated before it.
//
// # What is exact
//
// Against the outputs of the original code (the project's fixtures):
// pixelate, contrast, brightness, defocus_blur, zoom_blur and motion blur at
// a given angle reproduce every value; with replayed draws so do the three
// noises, glass_blur, motion_blur, snow, fog and elastic_transform, and
// frost up to Go's JPEG decoding of frost4.jpg and frost5.jpg (a few grey
// levels). jpeg_compression uses Go's codec, not libjpeg-turbo: its outputs
// differ by a mean of 0.1–3 grey levels. With PCG the random corruptions
// match the original's statistics over seeds, not its pixels.
package corrupt
