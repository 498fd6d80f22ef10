// SPDX-License-Identifier: MIT
//
// contrib/bench/gocrypto: ProtonMail go-crypto (Debian's
// golang-github-protonmail-go-crypto-dev) decrypting messages in-process,
// for contrib/bench/compare.sh.  It loads one secret key (binary or
// armored transferable secret key, unprotected), reads every message file
// into memory, checks that the first decryption of each gives the expected
// plaintext size (-size), then decrypts the messages round-robin with
// -threads goroutines until -n messages are done or -seconds have passed
// (whichever comes later, at least one message per file), reading every
// plaintext to its end so that the MDC is checked.  Prints one JSON object:
// messages, elapsed_s, msgs_per_s, mb_per_s (10^6 bytes of plaintext),
// latency_ms {p50, p99, max} and max_rss_kb (VmHWM of /proc/self/status:
// getrusage's ru_maxrss would carry over the RSS of the process that forked
// and exec'd this one).
//
// Built offline in GOPATH mode by compare.sh:
//
//	GOPATH=$WORK/gopath:/usr/share/gocode GO111MODULE=off go build
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
)

func decrypt(keys openpgp.EntityList, msg []byte) (int64, error) {
	md, err := openpgp.ReadMessage(bytes.NewReader(msg), keys, nil, nil)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, md.UnverifiedBody)
	if err != nil {
		return n, err
	}
	if !md.IsEncrypted {
		return n, fmt.Errorf("not encrypted")
	}
	return n, nil
}

// peak RSS of this process image, in KiB
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func main() {
	keyPath := flag.String("key", "", "secret key file")
	total := flag.Int("n", 10, "messages to decrypt (at least)")
	secs := flag.Float64("seconds", 0, "run for at least this long")
	threads := flag.Int("threads", 1, "goroutines decrypting at once")
	size := flag.Int64("size", -1, "expected plaintext size of every message")
	flag.Parse()
	if *keyPath == "" || flag.NArg() == 0 || *threads < 1 {
		fmt.Fprintln(os.Stderr, "usage: gocrypto -key KEY [-n N] [-seconds S] [-threads T] [-size B] MSG...")
		os.Exit(64)
	}
	kf, err := os.Open(*keyPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keys, err := openpgp.ReadKeyRing(kf)
	if err != nil {
		kf.Seek(0, io.SeekStart)
		keys, err = openpgp.ReadArmoredKeyRing(kf)
	}
	kf.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "key:", err)
		os.Exit(1)
	}
	var msgs [][]byte
	for _, p := range flag.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		msgs = append(msgs, b)
	}
	// correctness first, outside the timing
	for i, m := range msgs {
		n, err := decrypt(keys, m)
		if err != nil || (*size >= 0 && n != *size) {
			fmt.Fprintf(os.Stderr, "%s: %d bytes, %v\n", flag.Arg(i), n, err)
			os.Exit(1)
		}
	}
	if *total < len(msgs) {
		*total = len(msgs)
	}
	var next, failed, bytesOut int64
	lat := make([][]float64, *threads)
	deadline := time.Now().Add(time.Duration(*secs * float64(time.Second)))
	t0 := time.Now()
	var wg sync.WaitGroup
	for t := 0; t < *threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= int64(*total) && !time.Now().Before(deadline) {
					return
				}
				s := time.Now()
				n, err := decrypt(keys, msgs[i%int64(len(msgs))])
				lat[t] = append(lat[t], float64(time.Since(s).Nanoseconds())/1e6)
				if err != nil {
					atomic.AddInt64(&failed, 1)
				}
				atomic.AddInt64(&bytesOut, n)
			}
		}(t)
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Float64s(all)
	pct := func(p float64) float64 {
		i := int(p*float64(len(all))+0.5) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(all) {
			i = len(all) - 1
		}
		return all[i]
	}
	out := map[string]interface{}{
		"messages":   len(all),
		"failed":     failed,
		"threads":    *threads,
		"elapsed_s":  el,
		"msgs_per_s": float64(len(all)) / el,
		"mb_per_s":   float64(bytesOut) / 1e6 / el,
		"latency_ms": map[string]float64{"p50": pct(0.50), "p99": pct(0.99), "max": all[len(all)-1]},
		"max_rss_kb": vmHWM(),
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if failed > 0 {
		os.Exit(1)
	}
}
