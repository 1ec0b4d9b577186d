package tta

import "github.com/subtta/subtta/optim"

// TrainerValues returns a Method's trainable LayerNorm values, for the
// external tests.
func TrainerValues(m Method) [][]float64 {
	return m.(interface{ trainerOf() trainer }).trainerOf().values()
}

// OptimizerState returns a float32 Method's Adam state.
func OptimizerState(m Method) optim.State[float32] {
	return m.(interface{ trainerOf() trainer }).trainerOf().optimizer().(*optim.Adam[float32]).State()
}

func (b *base) trainerOf() trainer { return b.tr }
