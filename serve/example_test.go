package serve_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/serve"
)

// Serving the built-in model: frozen answers at once, and streams adapted
// by SubTTA-M in batches of up to 16, saved under state/ after every step.
// On Ctrl-C the waiting batches are stepped and answered before it exits.
func Example() {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := serve.New(serve.Config{
		Model: m, Tokenizer: builtin.Tokenizer(), ModelVersion: "built-in",
		Labels: data.CIFAR10Classes, Method: "subtta-m", BatchSize: 16,
		MaxWait: 250 * time.Millisecond, StateDir: "state",
	})
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Addr: "127.0.0.1:8080", Handler: s.Handler()}
	go hs.ListenAndServe()

	// curl --data-binary @cat.jpg -H 'Content-Type: image/jpeg' '127.0.0.1:8080/v1/classify?stream=cam1'
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	s.Shutdown(context.Background())
	hs.Shutdown(context.Background())
}
