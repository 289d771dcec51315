package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
)

// limitedListeners opens what exporter-toolkit's ListenAndServe would
// (each --web.listen-address, a vsock:// one, or systemd's sockets), each
// accepting at most maxConns connections at once: past that, a client
// waits in the kernel's backlog and holds none of the exporter's file
// descriptors, which are for perf events. close closes them all.
func limitedListeners(f *web.FlagConfig, maxConns int) (ls []net.Listener, close func(), err error) {
	close = func() {
		for _, l := range ls {
			l.Close()
		}
	}
	var raw []net.Listener
	if f.WebSystemdSocket != nil && *f.WebSystemdSocket {
		if raw, err = activation.Listeners(); err != nil {
			return nil, close, fmt.Errorf("systemd socket activation: %w", err)
		}
		if len(raw) == 0 {
			return nil, close, errors.New("--web.systemd-socket: no socket activation file descriptors found")
		}
	} else {
		for _, addr := range *f.WebListenAddresses {
			l, err := listen(addr)
			if err != nil {
				for _, l := range raw {
					l.Close()
				}
				return nil, close, fmt.Errorf("--web.listen-address %s: %w", addr, err)
			}
			raw = append(raw, l)
		}
	}
	for _, l := range raw {
		ls = append(ls, netutil.LimitListener(l, maxConns))
	}
	return ls, close, nil
}

// listen listens on a TCP address, or a vsock://:PORT one.
func listen(addr string) (net.Listener, error) {
	if !strings.HasPrefix(addr, "vsock://") {
		return net.Listen("tcp", addr)
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(addr, "vsock://"))
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("vsock port %q: %w", port, err)
	}
	return vsock.Listen(uint32(n), nil)
}

// limitedLog is the HTTP server's error log (a failed accept, a TLS
// handshake refused, a client gone mid-response): said through the
// exporter's logger, at WARN, at most once per interval, with how many
// were not said in between. A client that provokes errors cannot fill
// the log.
type limitedLog struct {
	logger     *slog.Logger
	limit      *rate.Limiter
	mu         sync.Mutex
	suppressed int
}

// newLimitedLog is a log.Logger for http.Server.ErrorLog.
func newLimitedLog(logger *slog.Logger, every time.Duration) *log.Logger {
	return log.New(&limitedLog{logger: logger, limit: rate.NewLimiter(rate.Every(every), 1)}, "", 0)
}

func (l *limitedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	if !l.limit.Allow() {
		l.suppressed++
		l.mu.Unlock()
		return len(p), nil
	}
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	l.logger.LogAttrs(context.Background(), slog.LevelWarn, "HTTP server error", slog.String("err", strings.TrimSpace(string(p))), slog.Int("suppressed_since_last", suppressed))
	return len(p), nil
}
