package online

// GradualSeverities is the severity sequence of the gradual protocol:
// each corruption's severity rises from 1 to 5 and falls back to 1, with
// no reset anywhere (the continual protocol over that sequence of
// domains), as the reference harness's "gradual" setting runs it.
var GradualSeverities = []int{1, 2, 3, 4, 5, 4, 3, 2, 1}

// Gradual is the name of the gradual protocol, for configurations: the
// runner runs it as Continual over the domains of GradualSeverities.
const Gradual = "gradual"
