package corrupt

// gaussianNoise: np.clip(x/255 + normal(scale=c), 0, 1) * 255.
func gaussianNoise(img *Image, c float64, e *env) (*Image, error) {
	x := toFloat(img)
	for i := range x {
		x[i] += e.src.Normal(0, c)
	}
	return fromUnit(x, img.H, img.W), nil
}

// shotNoise: np.clip(poisson(x/255 · c) / c, 0, 1) * 255.
func shotNoise(img *Image, c float64, e *env) (*Image, error) {
	x := toFloat(img)
	for i := range x {
		x[i] = float64(e.src.Poisson(x[i]*c)) / c
	}
	return fromUnit(x, img.H, img.W), nil
}

// impulseNoise is skimage's random_noise(mode="s&p", amount=c) in its
// 2019 form: a "flipped" mask with probability c over every value, then a
// "salted" mask with probability 1/2; flipped and salted values become 1,
// flipped and not salted 0. Both masks are drawn whole, one after the other.
func impulseNoise(img *Image, c float64, e *env) (*Image, error) {
	x := toFloat(img)
	flipped := make([]bool, len(x))
	for i := range flipped {
		flipped[i] = e.src.Bernoulli(c)
	}
	for i := range x {
		salted := e.src.Bernoulli(0.5)
		if flipped[i] {
			if salted {
				x[i] = 1
			} else {
				x[i] = 0
			}
		}
	}
	return fromUnit(x, img.H, img.W), nil
}
