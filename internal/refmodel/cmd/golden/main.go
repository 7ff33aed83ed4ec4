// Command golden writes the golden table of internal/refmodel: every case
// GenerateGolden makes, with the model's decision for each step, as JSON.
// go generate ./internal/refmodel runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ratesync/ratesync/internal/refmodel"
)

func main() {
	out := flag.String("o", "testdata/golden.json", "the file to write")
	flag.Parse()
	b, err := refmodel.GenerateGolden().Encode()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "golden:", err)
		os.Exit(1)
	}
}
