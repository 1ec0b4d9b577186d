// Package embedfile writes embeddings in bulk, resumably: one output is
// DIR/<name>.npy (float32, rows × dim, C order), DIR/<name>.jsonl (a
// Record per row, in order) and DIR/<name>.json (the Settings it was made
// with). Until complete they are <name>.npy.part and <name>.jsonl.part,
// written a batch at a time and synced, so that a run stopped at any
// point is resumed by the next one with the same settings from its last
// whole batch; a folder made with other settings is refused, not mixed,
// and so is a second writer while one holds the folder (its lock,
// internal/dirlock, is DIR/.lock).
// `subtta embed --images/--texts` writes through it.
package embedfile
