module github.com/subtta/subtta

go 1.26.0

require golang.org/x/sys v0.49.0

require (
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/nlpodyssey/gopickle v0.2.0 // indirect
	github.com/nlpodyssey/spago v1.1.0 // indirect
)
