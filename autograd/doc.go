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
//   - Linear (y = x·Wᵀ + b, weights in LinearParams; a frozen float32 weight
//     is packed once for the GEMM kernel), MatMul (with transpose flags);
//   - LayerNorm (LayerNormParams; SetTrainable marks γ and β for
//     adaptation), QuickGELU, GELU, Add, AddTiled, Scale;
//   - SelfAttention: multi-head attention over a batch of sequences from a
//     fused q|k|v projection, optionally causal;
//   - Patches and PatchEmbed (a vision transformer's patch convolution),
//     TokenEmbedding (class token and positional embedding), GatherRows;
//   - L2Normalize, Softmax, LogSoftmax, CrossEntropy, Entropy, MeanEntropy, Mean.
//
// A gradient flows to an operand only when it requires one
// (mat.Matrix.SetRequiresGrad): test-time adaptation marks the LayerNorm
// parameters only, so backward computes input gradients through frozen
// layers and parameter gradients for the LayerNorms alone.
//
// Shapes are checked when an op is built; a mismatch is a programmer error
// and panics with a message naming the op and the shapes (spago's tape
// cannot return errors from a forward pass). Backward passes take their
// scratch from pools, so a training step allocates the same amount every
// step: the op outputs, which live as long as the graph.
package autograd
