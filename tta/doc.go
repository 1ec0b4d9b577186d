// Package tta holds test-time adaptation for CLIP: SubTTA and the TENT,
// BATCLIP and MINT baselines, at the level of features and parameter
// vectors. The model-facing Methods build on these pieces: the model turns
// images into features F (B×d) and gradients w.r.t. F into gradients of the
// trainable LayerNorm vectors; everything here is checked against the
// PyTorch fixtures without a model.
//
// # Pieces
//
//   - The text subspace ([NewTextSubspace]): Σ_T, the thin SVD of the
//     centred class embeddings, the basis B_T and the projector P_T.
//   - The alignment step ([Align], [Aligner]): the batch covariance S, the
//     EMA Σ = α·Σ_old + (1−α)·S, its float64 eigendecomposition, B_V, the
//     chordal loss L_align = −‖B_V B_Tᵀ‖²_F/(r·max(1−α, 1e-6)) and its
//     closed-form gradients ∂L/∂S and ∂L/∂F, with no SVD backward.
//   - SubTTA's second step: [Project] (Z = normalize(F·P_T), optionally the
//     paper's soft projection) with its backward, [Logits], [Argmax], and
//     the losses [BetweenClassScatterLoss] ("mint"), [ClassMeanCosineLoss]
//     ("batclip") and [FeatureEntropyLoss] ("tent"), each with ∂L/∂Z.
//     [Head] is the zero-shot head that every method predicts with.
//   - The baselines' losses: [TentLoss], [BATCLIPLoss] and [WATTLoss] (one
//     template's loss of WATT), each with ∂L/∂F; MINT's per-domain class
//     statistics with its loss and prediction, [MINTState]; and TDA's
//     positive and negative caches, [TDACache], training-free.
//   - Diagnostics: [PrincipalAngleCosines], [SemanticConcentration],
//     [PredictedClassCosine].
//
// # Methods and the runner
//
// [Method] wires these pieces to a CLIP model (a [Model], which *clip.Model
// implements; package tta does not import clip). A type named after a
// method is that Method, and a name ending in Loss is a loss (TENT runs
// TentLoss): [Source], [TENT], [BATCLIP], [MINT], [SubTTA] (SubTTA-S/T/M/B
// by its second-step loss), [WATT] (WATT-S: per batch, rounds of sequential
// per-template steps with weight averaging, Mehrdad-Noori/WATT) and [TDA]
// (TDA's caches, sample by sample, kdiAAA/TDA), built by NewSource, NewTENT
// and so on. Each forward
// pass records the vision tower on a fresh spago tape; a feature-level
// gradient ∂L/∂F is injected on the feature node and propagated by
// ag.Backward to the visual LayerNorm parameters, which an optimizer of
// package optim, chosen by an [optim.Config], updates in place (MINT steps
// with an [optim.GradMean] of its batch gradients). [Runner] streams
// [Domain]s through a Method (reset per domain, continual or mixed) and logs
// per-batch diagnostics; [Lookup] returns the paper's configurations.
// Every Method is [Stateful]: its whole state between two Steps saves to
// bytes and restores into a Method built alike, which then continues bit
// for bit (subtta serve keeps each stream that way).
//
// All feature-level math runs in float64 on gonum matrices; use
// [DenseFromFloat32] and [Float32s] at the model boundary.
//
// # Code versus paper
//
// Where they disagree this package follows the official SubTTA code
// (zhichenz98/SubTTA_EMNLP26 @3baa2a2; docs/method.md lists every point):
//   - covariances are mean-centred and divided by n−1+1e-6; the image side
//     uses the unnormalised image features, the text side the normalised
//     text embeddings;
//   - the EMA is Σ = α·Σ_old + (1−α)·S (α is the weight on history), and
//     α = 0 turns the alignment step off ([AlignOptions]);
//   - the top principal component is dropped in both bases and
//     r = min(C−1, R) ([SubspaceOptions].KeepTopPC restores it);
//   - the default loss is the simplified MINT loss
//     ([BetweenClassScatterLoss]), not official MINT;
//   - the prediction is the plain head on a third forward pass, not the
//     projected logits of the paper's Algorithm 1;
//   - the EMA covariance survives the reset between corruptions: an
//     [Aligner] keeps it until Reset is called;
//   - the "tent" variant takes the entropy over feature dimensions, as the
//     code does.
//
// The soft projection is only suggested by the paper; Project's soft
// argument provides it (0 reproduces the code).
//
// # Choices of this port
//
// Rank deficiency (CIFAR-10): with C=10 the centred text embeddings have
// rank 9, but dropping the top component and taking r = 9 rows needs a
// tenth direction, which the code takes from the null space (an arbitrary,
// LAPACK-dependent direction). By default [NewTextSubspace] leaves
// numerically null directions out, so CIFAR-10 uses principal components
// 2–9 (r = 8); SubspaceOptions.KeepNullDirections reproduces the code's
// count with whatever null direction the SVD returns.
//
// Eigen-gaps: ∂L/∂S divides by λ_k − λ_j for k inside and j outside the
// basis. A gap below [AlignOptions].GapTol·λ_max (default [DefaultGapTol])
// is clamped to that size, keeping its sign, and counted in
// [Alignment].GuardedGaps. This only prevents Inf and NaN at exact ties: near
// a tie the loss itself is barely differentiable and the gradient is large
// (~1/gap) either way. On the fixtures the smallest boundary gap is about
// 8e-5·λ_max and nothing is clamped.
package tta
