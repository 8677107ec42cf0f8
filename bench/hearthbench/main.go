// Command hearthbench runs Hearth's benchmarks and prints their tables as
// Markdown (docs/PERFORMANCE.md is a copy of one run of hack/bench.sh).
//
//	go run ./bench/hearthbench [flags] [benchmark...]
//
// With no benchmark named it runs them all. See -list.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/hearthvm/hearth/bench/internal/suite"
)

func main() {
	var (
		quick  = flag.Bool("quick", false, "small sizes (a smoke run)")
		claims = flag.Int("claims", 0, "claims per concurrency level (default 4000, quick 200)")
		conc   = flag.String("c", "1,8,32", "concurrency levels, comma separated")
		list   = flag.Bool("list", false, "list the benchmarks and exit")
		quiet  = flag.Bool("q", false, "no progress lines on stderr")
		cpuOut = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		memOut = flag.String("memprofile", "", "write an allocation profile of the whole run to this file (samples one allocation per 4 KiB)")
	)
	flag.Parse()
	if *memOut != "" {
		runtime.MemProfileRate = 4096
		defer writeAllocs(*memOut)
	}
	if *cpuOut != "" {
		f, err := os.Create(*cpuOut)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "hearthbench: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *list {
		for _, b := range suite.All {
			fmt.Printf("%-12s %s\n", b.Name, b.Doc)
		}
		return
	}
	cfg := suite.Config{Out: os.Stdout, Quick: *quick, Claims: *claims, Log: os.Stderr}
	if *quiet {
		cfg.Log = nil
	}
	for _, s := range strings.Split(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c <= 0 {
			fmt.Fprintf(os.Stderr, "hearthbench: bad concurrency %q\n", s)
			os.Exit(2)
		}
		cfg.Concurrency = append(cfg.Concurrency, c)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := suite.Run(ctx, cfg, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "hearthbench: %v\n", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// writeAllocs writes the allocation profile (go tool pprof -sample_index=alloc_space).
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hearthbench: %v\n", err)
	}
}
