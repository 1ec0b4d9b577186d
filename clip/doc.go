// Package clip is the model facade: Load a CLIP checkpoint (safetensors,
// PyTorch .pt, a Hugging Face directory; OpenAI, open_clip or HF names),
// encode images and texts, and build zero-shot classifiers from class names
// and prompt templates.
package clip
