package tta

import (
	"errors"
	"fmt"
)

// ErrNeedsViews is returned by the Step of a MultiView method: it sees
// several views of each image (StepViews), which a runner gives it.
var ErrNeedsViews = errors.New("tta: the method needs several views of each image")

// ViewKind is how the random views of a multi-view method are made from
// the decoded image.
type ViewKind int

const (
	// CropFlip views are random resized crops with horizontal flips
	// (torchvision's RandomResizedCrop and RandomHorizontalFlip defaults):
	// TPT, VTE, ZERO, DMN.
	CropFlip ViewKind = iota
	// AugMix views are AugMix mixtures of a crop with flip (MEMO).
	AugMix
)

func (k ViewKind) String() string {
	switch k {
	case CropFlip:
		return "crop+flip"
	case AugMix:
		return "augmix"
	}
	return fmt.Sprintf("ViewKind(%d)", int(k))
}

// MultiView is a Method that sees V views of each image rather than the
// image alone (VTE, ZERO, TPT, MEMO, DMN): view 0 of an image is its base
// view (CLIP's preprocessing), views 1…V−1 random crops with flips of the
// decoded image (data.Preprocessor.Views), seeded per image so that a run
// gives the same bits at any thread count and after a resume. The views of
// one image go through the tower as one batch.
type MultiView interface {
	Method
	// Views is the number of views V per image, at least 2, and
	// ViewKind how views 1…V−1 are made.
	Views() int
	ViewKind() ViewKind
	// StepViews adapts on and classifies n images given as n·v
	// preprocessed views (NCHW float32), image after image, view 0 of
	// each first.
	StepViews(views []float32, n, v int) (*Result, error)
}

// SetViews changes a multi-view preset's V (the --views flag); it refuses
// fewer than 2 views, and any count for a method that takes one view.
func (p *Preset) SetViews(v int) error {
	if p.Views == 0 {
		return fmt.Errorf("tta: %s sees one view of each image: it takes no view count (%d given)", p.Method, v)
	}
	if v < max(2, p.MinViews) {
		return fmt.Errorf("tta: %s: %d views per image, want at least %d (the base view and a random one, and enough that a confident view is kept)", p.Method, v, max(2, p.MinViews))
	}
	p.Views = v
	return nil
}
