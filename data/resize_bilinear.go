package data

import (
	"fmt"
)

// This file adds Pillow 9.4's Image.resize(size, BILINEAR) for 8-bit
// images, the resize of ImageNet-C's input pipeline (torchvision's
// Resize(256) on a PIL image): the antialiased separable convolution of
// preprocess_resample.go with Pillow's triangle filter (support 1, scaled
// by the reduction factor).

// ResizeBilinear resizes img to w×h exactly as Pillow 9.4's
// Image.resize((w, h), Image.BILINEAR) does on an RGB image: an
// antialiased triangle filter whose support grows with the reduction.
func ResizeBilinear(img *RGB, w, h int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: resize: %w", err)
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("data: resize: target size %dx%d", w, h)
	}
	out := NewRGB(w, h)
	resizeWindow(bilinearFilter, out.Pix, plane{pix: img.Pix, stride: 3 * img.W, nch: 3}, img.W, img.H, w, h, 0, 0, w, h)
	return out, nil
}

// ImageNet-C's input pipeline (make_imagenet_c.py): the validation image is
// resized so that its short side is 256, then the centre 224×224 square is
// corrupted.
const (
	imageNetCResize = 256
	imageNetCCrop   = 224
)

// imageNetCInput is torchvision's Compose([Resize(256), CenterCrop(224)])
// on a PIL image (bilinear), computing only the pixels the crop keeps.
func imageNetCInput(img *RGB) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: ImageNet-C input: %w", err)
	}
	rw, rh := resizedSize(imageNetCResize, img.W, img.H)
	left, top := CenterCropOffset(rw, rh, imageNetCCrop, imageNetCCrop)
	out := NewRGB(imageNetCCrop, imageNetCCrop)
	resizeWindow(bilinearFilter, out.Pix, plane{pix: img.Pix, stride: 3 * img.W, nch: 3}, img.W, img.H, rw, rh, left, top, imageNetCCrop, imageNetCCrop)
	return out, nil
}
