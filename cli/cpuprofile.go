package cli

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
)

// startCPUProfile writes this process's CPU profile to path until the
// returned stop is called. Where the platform has SIGUSR1, that signal
// closes the current profile and starts the next one in path.1, then
// path.2, and so on, so one server run can be profiled in parts (ebbbench
// takes one profile per workload this way).
func startCPUProfile(path string, log *slog.Logger) (stop func(), err error) {
	var (
		mu   sync.Mutex
		f    *os.File
		n    int
		done = make(chan struct{})
	)
	begin := func(name string) error {
		out, err := os.Create(name)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			out.Close()
			return err
		}
		f = out
		return nil
	}
	end := func() {
		if f == nil {
			return
		}
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Warn("cpu profile", "file", f.Name(), "err", err)
		}
		f = nil
	}
	if err := begin(path); err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	if s := profileSignals(); len(s) > 0 {
		signal.Notify(sigs, s...)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-sigs:
				mu.Lock()
				end()
				n++
				if err := begin(fmt.Sprintf("%s.%d", path, n)); err != nil {
					log.Warn("cpu profile", "err", err)
				}
				mu.Unlock()
			}
		}
	})
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		mu.Lock()
		end()
		mu.Unlock()
	}, nil
}
