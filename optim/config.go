package optim

import "fmt"

// Config chooses an optimizer and its hyperparameters: SGD when SGD is set,
// otherwise Adam (AdamW when Adam.Decoupled is set). It is the form
// settings take before there is an element type; New builds the optimizer.
type Config struct {
	Adam AdamConfig
	SGD  *SGDConfig
}

// AdamW returns the config of torch.optim.AdamW(lr, weight_decay=wd).
func AdamW(lr, wd float64) Config {
	c := DefaultAdamConfig(lr)
	c.WeightDecay, c.Decoupled = wd, true
	return Config{Adam: c}
}

// AdamL2 returns the config of torch.optim.Adam(lr, weight_decay=wd), an L2
// penalty added to the gradient.
func AdamL2(lr, wd float64) Config {
	c := DefaultAdamConfig(lr)
	c.WeightDecay = wd
	return Config{Adam: c}
}

// String names the optimizer and its main hyperparameters, as in
// "AdamW(lr=0.001, wd=0.01)".
func (c Config) String() string {
	if c.SGD != nil {
		s := c.SGD
		return fmt.Sprintf("SGD(lr=%g, momentum=%g, nesterov=%v, wd=%g)", s.LR, s.Momentum, s.Nesterov, s.WeightDecay)
	}
	name := "Adam"
	if c.Adam.Decoupled {
		name = "AdamW"
	}
	return fmt.Sprintf("%s(lr=%g, wd=%g)", name, c.Adam.LR, c.Adam.WeightDecay)
}

// New returns the optimizer c chooses, for parameters of element type T,
// with empty state.
func New[T Float](c Config) (Optimizer[T], error) {
	if c.SGD != nil {
		s, err := NewSGD[T](*c.SGD)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	a, err := NewAdam[T](c.Adam)
	if err != nil {
		return nil, err
	}
	return a, nil
}
