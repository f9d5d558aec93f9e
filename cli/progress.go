package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Progress display modes (--progress).
const (
	progressAuto  = "auto"  // a bar on a terminal, plain lines otherwise
	progressBar   = "bar"   // always the bar
	progressPlain = "plain" // always plain lines
	progressOff   = "off"   // nothing
)

// progressFlags are the flags of the commands that show progress on long
// work (gc run, ttl run, backup create, restore, replication diff).
type progressFlags struct {
	mode     string
	interval time.Duration
}

func (p *progressFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.mode, "progress", progressAuto,
		"how to show progress on stderr: auto (a bar when stderr is a terminal, else a plain line every --progress-interval while the count moves), bar, plain or off")
	cmd.Flags().DurationVar(&p.interval, "progress-interval", 2*time.Second,
		"how often plain progress lines are printed (the first after one interval, so quick work prints none)")
}

// barRefresh is how often the bar polls the server.
const barRefresh = 200 * time.Millisecond

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// track runs fn with a context whose requests carry a fresh progress id
// (server.MetaProgressID), and while fn runs polls the server for that
// id's progress and shows it on the command's stderr: a progress bar on a
// terminal, plain lines otherwise. what prefixes plain lines ("gc run").
func (p *progressFlags) track(ctx context.Context, cmd *cobra.Command, cf *connFlags, what string, fn func(ctx context.Context) error) error {
	mode := p.mode
	switch mode {
	case progressAuto:
		mode = progressPlain
		if isTerminal(cmd.ErrOrStderr()) {
			mode = progressBar
		}
	case progressBar, progressPlain:
	case progressOff:
		return fn(ctx)
	default:
		return usagef("--progress %q: want auto, bar, plain or off", p.mode)
	}
	if p.interval <= 0 {
		return usagef("--progress-interval %v: want a positive duration", p.interval)
	}
	var raw [12]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	ctx = metadata.AppendToOutgoingContext(ctx, server.MetaProgressID, id)

	pollCtx, stop := context.WithCancel(ctx)
	shown := make(chan struct{})
	go func() {
		defer close(shown)
		p.show(pollCtx, cmd.ErrOrStderr(), cf, id, what, mode)
	}()
	err := fn(ctx)
	stop()
	<-shown
	return err
}

// show polls the progress of id until ctx ends and renders it.
func (p *progressFlags) show(ctx context.Context, w io.Writer, cf *connFlags, id, what, mode string) {
	conn, err := cf.dial(ctx)
	if err != nil {
		return // the command itself reports a server it cannot reach
	}
	defer conn.Close()
	period := p.interval
	if mode == progressBar {
		period = min(period, barRefresh)
	}
	r := &progressRenderer{w: w, what: what, bar: mode == progressBar}
	defer r.close()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		snap, ok := pollProgress(ctx, conn, id)
		if ok {
			r.render(snap)
		}
	}
}

// progressState is one answer of the Progress method.
type progressState struct {
	phase, unit string
	done, total int64
	finished    bool
}

func pollProgress(ctx context.Context, conn *grpc.ClientConn, id string) (progressState, bool) {
	resp, err := ebbadminpb.NewEbbAdminClient(conn).Progress(ctx, &ebbadminpb.ProgressRequest{Id: id})
	if err != nil || !resp.GetFound() {
		return progressState{}, false
	}
	return progressState{phase: resp.GetPhase(), unit: resp.GetUnit(), done: resp.GetDone(), total: resp.GetTotal(), finished: resp.GetFinished()}, true
}

// progressRenderer draws successive states: one progressbar per phase
// (a spinner while the total is unknown), or a plain line whenever the
// state has changed.
type progressRenderer struct {
	w     io.Writer
	what  string
	bar   bool
	pb    *progressbar.ProgressBar
	last  progressState
	phase string
}

func (r *progressRenderer) render(s progressState) {
	if s == r.last {
		return
	}
	r.last = s
	if !r.bar {
		line := fmt.Sprintf("%s: %s: %d %s", r.what, s.phase, s.done, s.unit)
		if s.total >= 0 {
			line = fmt.Sprintf("%s: %s: %d of %d %s (%d%%)", r.what, s.phase, s.done, s.total, s.unit, percent(s.done, s.total))
		}
		fmt.Fprintln(r.w, line)
		return
	}
	if r.pb == nil || s.phase != r.phase {
		r.close()
		r.phase = s.phase
		r.pb = progressbar.NewOptions64(s.total,
			progressbar.OptionSetWriter(r.w),
			// No rate: the bar starts when the phase is first seen,
			// after work the rate would count as done in no time.
			progressbar.OptionSetDescription(s.phase+", "+s.unit),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(s.total >= 0),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(barRefresh/2),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionUseANSICodes(true),
		)
	}
	if s.total >= 0 && s.done > s.total {
		s.done = s.total
	}
	r.pb.Set64(s.done)
}

// close clears the bar, so the command's result prints on a clean line.
func (r *progressRenderer) close() {
	if r.pb != nil {
		r.pb.Clear()
		r.pb = nil
	}
}

func percent(done, total int64) int64 {
	if total <= 0 {
		return 100
	}
	return min(100, done*100/total)
}
