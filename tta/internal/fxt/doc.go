// Package fxt reads the PyTorch fixtures of the tta packages' tests as gonum
// matrices and compares results with them, printing the worst error.
package fxt
