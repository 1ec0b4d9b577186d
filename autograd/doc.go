// Package autograd holds the differentiable operations of the models: fused
// ops over whole matrices recorded on spago's tape (github.com/nlpodyssey/spago/ag),
// with their forward and backward passes written out by hand.
//
// Every op takes and returns mat.Tensor values holding 2-D *mat.Dense
// matrices, rows being tokens (or images) and columns features. Models run
// in float32 on the kernels of package kernel; the same code runs in float64
// for references and for Gradcheck, the finite-difference gradient check
// every op is tested with. Operands of one op must share the element type.
//
// The ops:
//
//   - Linear (y = x·Wᵀ + b, weights in LinearParams), MatMul (with
//     transpose flags);
//   - LayerNorm (LayerNormParams; SetTrainable marks γ and β for
//     adaptation), QuickGELU, GELU, Add, AddTiled, Scale, ExpScale (a learned
//     temperature);
//   - SelfAttention: multi-head attention over a batch of sequences from a
//     fused q|k|v projection, optionally causal;
//   - TransformerBlock: a whole pre-LN residual block (BlockParams) as one
//     op that keeps less than half the memory of the separate ops for
//     backward, and TransformerBlockRows, the block's output at some rows
//     only (the class token after a last block);
//   - Patches and PatchEmbed (a vision transformer's patch convolution),
//     TokenEmbedding (class token and positional embedding), GatherRows;
//   - L2Normalize, Softmax, LogSoftmax, CrossEntropy, Entropy, MeanEntropy, Mean.
//
// A gradient flows to an operand only when it requires one
// (mat.Matrix.SetRequiresGrad): test-time adaptation marks the LayerNorm
// parameters only, so backward computes input gradients through frozen
// layers and parameter gradients for the LayerNorms alone. An op none of
// whose operands requires a gradient is not recorded: its result is a plain
// matrix, so that a forward pass without gradients keeps no activations
// alive behind its output.
//
// Shapes are checked when an op is built; a mismatch is a programmer error
// and panics with a message naming the op and the shapes (spago's tape
// cannot return errors from a forward pass). Backward passes take their
// scratch from pools, so a training step allocates the same amount every
// step: the op outputs, which live as long as the graph. TransformerBlock
// hands what it keeps for backward back to its pool once backward has run,
// so backward may run only once through a graph that holds it (as in
// PyTorch without retain_graph).
//
// SetDevice moves the heavy float32 work onto a kernel.Device, such as a
// GPU (package gpu): blocks without a tape run whole there, blocks that
// record for backward forward and backward there (the gradients of their
// trainable parameters computed there too), and other linear products with
// frozen weights in every pass.
package autograd
