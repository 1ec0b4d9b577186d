// Package vit is the CLIP vision tower: a ViT with a convolutional patch
// embedding (no bias), a class token, learned positional embeddings,
// ln_pre, pre-LN residual blocks (fused q/k/v attention, an MLP with the
// configured activation: QuickGELU as OpenAI trained, or GELU), ln_post on
// the class token and a linear projection into the joint space.
//
// Forward records the whole computation on spago's tape through the ops of
// package autograd, over the batch at once, so that a loss built on its
// output can be differentiated with respect to the LayerNorm parameters
// (test-time adaptation) or the pixels. Each residual block is one fused op
// (autograd.TransformerBlock) that keeps only what backward needs, and the
// last block is computed past its keys and values for the class tokens
// alone; without gradients nothing is kept at all. The model is float32 by
// default and can be built in float64 for reference runs.
package vit
