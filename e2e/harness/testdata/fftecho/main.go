// Command fftecho is a tiny helper used by the harness tests: it prints
// "ready", then waits for SIGTERM, prints "terminating" and exits 0.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	fmt.Println("ready", os.Getenv("FFTECHO_GREETING"))
	<-ch
	fmt.Println("terminating")
}
