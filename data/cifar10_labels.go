package data

// CIFAR10Classes are CIFAR-10's class names in label order (the dataset's
// batches.meta.txt).
var CIFAR10Classes = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}

// CIFAR10Templates are the 18 prompt templates OpenAI used for CIFAR-10
// zero-shot classification ("{}" stands for the class name).
var CIFAR10Templates = []string{
	"a photo of a {}.",
	"a blurry photo of a {}.",
	"a black and white photo of a {}.",
	"a low contrast photo of a {}.",
	"a high contrast photo of a {}.",
	"a bad photo of a {}.",
	"a good photo of a {}.",
	"a photo of a small {}.",
	"a photo of a big {}.",
	"a photo of the {}.",
	"a blurry photo of the {}.",
	"a black and white photo of the {}.",
	"a low contrast photo of the {}.",
	"a high contrast photo of the {}.",
	"a bad photo of the {}.",
	"a good photo of the {}.",
	"a photo of the small {}.",
	"a photo of the big {}.",
}
