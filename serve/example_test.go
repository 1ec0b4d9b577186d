package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
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

// A frozen answer through the handler: POST an image, get the label
// probabilities in label order; a body that is not an image gets a 4xx
// with a JSON error.
func Example_classify() {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := serve.New(serve.Config{Model: m, Tokenizer: builtin.Tokenizer(), ModelVersion: "built-in", Labels: data.CIFAR10Classes})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	img := image.NewRGBA(image.Rect(0, 0, 32, 32))
	draw.Draw(img, img.Bounds(), &image.Uniform{color.RGBA{40, 90, 200, 255}}, image.Point{}, draw.Src)
	var jpg bytes.Buffer
	jpeg.Encode(&jpg, img, nil)
	resp, err := http.Post(srv.URL+"/v1/classify", "image/jpeg", &jpg)
	if err != nil {
		log.Fatal(err)
	}
	var out struct {
		Model  string
		Labels []string
		Probs  []float64
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	sum := 0.0
	for _, p := range out.Probs {
		sum += p
	}
	fmt.Printf("%d %s: %d labels, first %s, probabilities sum to %.2f\n", resp.StatusCode, out.Model, len(out.Labels), out.Labels[0], sum)

	resp, err = http.Post(srv.URL+"/v1/classify", "image/jpeg", strings.NewReader("not a jpeg"))
	if err != nil {
		log.Fatal(err)
	}
	var e struct{ Error string }
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, e.Error != "")
	// Output:
	// 200 built-in: 10 labels, first airplane, probabilities sum to 1.00
	// 400 true
}
