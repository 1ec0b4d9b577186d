// Package feature is the model-free float64 math of test-time adaptation
// on CLIP features: everything that works on image features F (B×d) and
// text features T (C×d), with the gradients w.r.t. F that a method injects
// into the model's tape. It imports neither the model nor the methods
// (package tta); every function is checked against the PyTorch fixtures
// without a model.
//
// # Contents
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
//     [Classify] is the zero-shot classification every method predicts with.
//   - The baselines' losses: [TentLoss], [BATCLIPLoss] and [WATTLoss] (one
//     template's loss of WATT), each with ∂L/∂F; MINT's per-domain class
//     statistics with its loss and prediction, [MINTState]; and TDA's
//     positive and negative caches, [TDACache], training-free.
//   - ECALP's streaming graph, [ECALPGraph] (Yushu-Li/ECALP@96ddf0b,
//     training-free): text and image nodes, the current image duplicated,
//     edges sim^γ with the variance weight w, neighbour lists kept
//     incrementally with spare candidates exactly as the code keeps them
//     (they differ from a from-scratch k-NN), ties in torch's top-k order,
//     and the iterative label propagation with its sparse prior. Its state
//     saves with State and SetState.
//   - RoTTA's model-free parts (harness methods/rotta.py): the
//     category-balanced memory [RoTTAMemory] (CSTU: per-class quota,
//     eviction by age and uncertainty, ageing; Items and SetItems save it),
//     [TimelinessWeights], the teacher's pseudo-labels and uncertainties
//     ([RoTTAPseudoLabels]), the loss [SoftCrossEntropy] with ∂L/∂logits and
//     [RoTTALoss] with ∂L/∂F, and the teacher's [EMAUpdate].
//   - The confidence selection of the multi-view baselines (TPT, VTE, DMN,
//     ZERO): [SoftmaxEntropies] of every view's logits (exact, or DMN's
//     log(p + ε)), [KeepCount] = int(V·ρ) as the code computes it, and
//     [SelectLowestEntropy] / [SelectConfident], a stable ascending order
//     of the views split into kept and discarded ([ErrEmptySelection] when
//     nothing is kept).
//   - The marginal entropy of TPT and MEMO, [MarginalEntropy]: H of the
//     views' mean softmax, formed in log space, with its gradient w.r.t.
//     the view logits in the same call; [MarginalEntropyLoss] carries it
//     through the zero-shot head to the view features (MEMO).
//   - VTE, [VTEPredict]: the mean of the kept views' normalised features,
//     not renormalised (as the code), and its logits; no state.
//   - ZERO, [ZeroVote]: one near-one-hot vote softmax(l/ε) per kept view
//     (ε the float32 epsilon), the tie-break over the discarded views, and
//     the code's fallback either as it computes ([ZeroFallbackAsCoded],
//     which reproduces the fixtures) or as intended ([ZeroFallbackTied]).
//   - DMN's zero-shot memory, [DMNMemory]: per class up to Capacity base-
//     view features with their entropies (log(p̄ + 1e-8)), replaced by
//     entropy, read by a similarity-weighted attention that always includes
//     the class's text embedding; p_txt + w·p_mem with a fixed w. Its state
//     saves through Entries and SetEntries.
//   - STS's head spectrum and steering: [Spectrum] / [NewSpectrum], the
//     head steered by a vector γ ([Spectrum.Steer]) and the steering loss
//     with its gradient ([Spectrum.SteeringLoss], [SteeringResult]).
//   - Diagnostics: [PrincipalAngleCosines], [SemanticConcentration],
//     [PredictedClassCosine].
//
// State setters wrap [ErrStateMismatch] when saved state does not fit.
//
// All feature-level math runs in float64 on gonum matrices; use
// [DenseFromFloat32] and [Float32s] at the model boundary.
//
// The multi-view baselines follow their official code, cited in the doc
// comments as [H] mariodoebler/test-time-adaptation @8b2ed63 (the harness
// of VTE and MEMO), [TPT] azshue/TPT @63ecbac, [ZERO] FarinaMatteo/zero
// @c609f7c and [DMN] YBZh/DMN @c6c218c; where that code and a plain
// reading differ (VTE's mean is not renormalised, ZERO's votes are
// softmax(l/ε) and its fallback tie-break masks other classes than the tied
// ones, DMN's entropies carry epsilons), the code wins, and the doc
// comments say so.
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
package feature
