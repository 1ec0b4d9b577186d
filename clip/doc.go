// Package clip is the model facade: Create resolves a checkpoint (or a
// registered model), its architecture, its tokenizer and its preprocessor
// in one call, as open_clip's create_model_and_transforms and
// get_tokenizer do; Load reads a CLIP checkpoint (safetensors, PyTorch .pt,
// a Hugging Face directory; OpenAI, open_clip or HF names). A Model encodes
// images and texts, builds zero-shot heads from class names and prompt
// templates (ZeroShotHead, the one builder) and scores images against them
// (ZeroShotLogits, the one scorer, behind Classify).
package clip
