// Package zeroshot is CLIP's zero-shot scorer: logits = scale ·
// normalize(f) · tᵀ for image features f and a head t of unit class rows,
// and their argmax. It is the one scorer of the project: the model
// (clip.ZeroShotLogits: subtta classify, serve's frozen answers,
// training's accuracy) and every adaptation method (package tta, through
// tta/feature) call it, so that all of them give the same bits for the
// same features and head. It depends on gonum and internal/rowdot only, so that the model and
// the adaptation math both stand on it without depending on each other.
package zeroshot
