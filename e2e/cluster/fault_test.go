package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDelayProxy_DelaysAnswersOnlyWhileSet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	defer srv.Close()
	p, err := NewDelayProxy(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	get := func() (string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + p.Addr() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), time.Since(start)
	}
	if body, took := get(); body != "ok /x" || took > 150*time.Millisecond {
		t.Fatalf("no delay: %q in %v", body, took)
	}
	p.SetDelay(300 * time.Millisecond)
	if body, took := get(); body != "ok /x" || took < 300*time.Millisecond {
		t.Fatalf("delay 300ms: %q in %v", body, took)
	}
	p.SetDelay(0)
	if _, took := get(); took > 150*time.Millisecond {
		t.Fatalf("delay off: %v", took)
	}
}

func TestDelayProxy_DeadUpstreamClosesTheConnection(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewDelayProxy(Addr(port))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.Addr() + "/"); err == nil {
		t.Fatal("GET through a proxy to nothing succeeded")
	}
}

func TestProc_SignalKillRestart(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("sleeper", dir, "/bin/sh", []string{"-c", "echo up; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	ups := func(n int) {
		t.Helper()
		err := Poll(nil, 5*time.Second, 10*time.Millisecond, func() (bool, error) {
			b, _ := os.ReadFile(p.Log)
			return strings.Count(string(b), "up\n") == n, nil
		})
		if err != nil {
			b, _ := os.ReadFile(p.Log)
			t.Fatalf("log: %q, want %d lines \"up\"", b, n)
		}
	}
	ups(1)
	if err := p.Restart(); err == nil {
		t.Fatal("Restart of a running process succeeded")
	}
	first := p.PID()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); !done {
		t.Fatal("not exited after Kill")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); done || p.PID() == first {
		t.Fatalf("restart: exited %v, pid %d (was %d)", done, p.PID(), first)
	}
	ups(2)
	// A stopped process still stops (Stop sends SIGCONT first).
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second)
	if done, _ := p.Exited(); !done {
		t.Fatal("not exited after Stop")
	}
	if b, _ := os.ReadFile(p.Log); !strings.Contains(string(b), "restarting sleeper") {
		t.Fatalf("log after restart: %q", b)
	}
}
