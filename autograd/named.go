package autograd

import "github.com/nlpodyssey/spago/mat"

// Named is one tensor of a model under its name in the checkpoint, as the
// model records it when it reads the checkpoint (PyTorch's
// named_parameters()): what training, a LayerNorm snapshot or a view of
// the adapted parameters walk, rather than each naming the model's tensors
// again.
type Named struct {
	Name string
	// Value is the matrix the model computes with: writing into it
	// changes the model.
	Value mat.Matrix
	// Decay marks a weight that weight decay applies to: a linear layer's
	// weight (the patch projection included) or a projection into the
	// joint space; not gains, biases, embeddings or the temperature.
	Decay bool
	// LayerNorm marks a LayerNorm's γ or β.
	LayerNorm bool
}
