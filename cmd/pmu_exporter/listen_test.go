package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The server's error log says the first error through the exporter's
// logger, drops the rest within the interval, and says how many it
// dropped with the next one it says.
func TestLimitedLog(t *testing.T) {
	var buf bytes.Buffer
	l := newLimitedLog(slog.New(slog.NewTextHandler(&buf, nil)), 100*time.Millisecond)
	for i := range 50 {
		l.Printf("http: Accept error: accept tcp: too many open files; retrying in %dms", i)
	}
	time.Sleep(150 * time.Millisecond)
	l.Printf("http: TLS handshake error from 10.0.0.1:5555: EOF")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines logged for 51 errors, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `level=WARN msg="HTTP server error" err="http: Accept error: accept tcp: too many open files; retrying in 0ms" suppressed_since_last=0`) {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], `err="http: TLS handshake error from 10.0.0.1:5555: EOF" suppressed_since_last=49`) {
		t.Errorf("second line: %s", lines[1])
	}
}
