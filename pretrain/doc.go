// Package pretrain trains a CLIP from scratch with the repository's own
// towers, tape and kernels: the model that package builtin embeds was made
// with it (`subtta train`).
//
// The objective suits a labelled image set such as CIFAR-10, where a batch
// holds many images of the same class: each step encodes the batch's
// augmented images and one caption per class (a template drawn at random
// for each class, filled with the class name), and minimises the
// cross-entropy of the logits exp(logit_scale)·cos(image, caption)
// against each image's class (Loss), with label smoothing. Both towers and
// the temperature are trained; the text tower is the classifier, so
// zero-shot classification afterwards runs through prompts as for any CLIP
// (ZeroShotAccuracy).
//
// Optimisation is AdamW (optim.Adam, decoupled decay on linear and
// projection weights only: not on gains, biases, embeddings or the
// temperature), a linear warm-up and a cosine decay of the learning rate
// (Config.LearningRate), and clipping of the global gradient norm. Images
// are augmented with a random crop of the zero-padded image and a
// horizontal flip (Augment). RandomState initialises a model as OpenAI's
// CLIP.initialize_parameters does.
//
// Run trains to the last epoch in a run folder, writing a checkpoint
// (weights, Adam moments, step) every CheckpointEvery steps, at the end of
// every epoch and when its context is cancelled, and resumes from it. All
// random draws are functions of the seed and the step, so a resumed run
// computes the same weights, bit for bit, as one never interrupted. A
// checkpoint resumes only with the settings (Config) and the training set
// (DataIdentity: its images, labels and order) it was made with; other
// settings are refused naming each that differs (SettingsError). After
// each epoch it classifies a test set zero-shot and appends an EpochRecord
// to log.jsonl; an epoch whose test pass is interrupted is kept in the
// checkpoint as untested and tested and logged first on resumption, so
// that no epoch is logged without its test accuracy.
package pretrain
