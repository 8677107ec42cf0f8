package uds

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseOK(t *testing.T) {
	tests := []struct {
		in      string
		want    uint32
		wantErr bool
	}{
		{"OK 1073741824\n", 1073741824, false},
		{"OK 5", 5, false},
		{"OK\n", 0, true},
		{"ok 5\n", 0, true},
		{"OK -1\n", 0, true},
		{"OK 99999999999\n", 0, true},
		{"", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseOK(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseOK(%q) = %d, %v", tc.in, got, err)
		}
	}
}

func TestParseConnect(t *testing.T) {
	for in, want := range map[string]uint32{"CONNECT 49983\n": 49983, "CONNECT 52": 52} {
		if got, err := ParseConnect(in); err != nil || got != want {
			t.Errorf("ParseConnect(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"CONNECT\n", "CONNECT x\n", "connect 1\n", "GET / HTTP/1.1\r\n"} {
		if _, err := ParseConnect(bad); err == nil {
			t.Errorf("ParseConnect(%q) accepted", bad)
		}
	}
}

func FuzzHandshake(f *testing.F) {
	for _, s := range []string{"OK 1\n", "CONNECT 49983\n", "OK \n", "CONNECT 4294967296\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParseConnect(s); err == nil {
			if q, err := ParseConnect(ConnectLine(p)); err != nil || q != p {
				t.Fatalf("CONNECT round trip %d → %d, %v", p, q, err)
			}
		}
		_, _ = ParseOK(s)
	})
}

func TestParseSmapsRollup(t *testing.T) {
	text := "00400000-7ffd [rollup]\nRss:                1024 kB\nPss:                 600 kB\nShared_Clean:        300 kB\nShared_Dirty:        100 kB\nPrivate_Clean:        24 kB\nPrivate_Dirty:       600 kB\n"
	rss, priv, shared := ParseSmapsRollup(text)
	if rss != 1024<<10 || priv != 624<<10 || shared != 400<<10 {
		t.Fatalf("got rss=%d private=%d shared=%d", rss, priv, shared)
	}
}

func TestParseStatCPU(t *testing.T) {
	stat := "1234 (fire cracker) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 1000 50"
	got, err := ParseStatCPU(stat, 100)
	if err != nil || got != 3.0 {
		t.Fatalf("ParseStatCPU = %v, %v", got, err)
	}
	if _, err := ParseStatCPU("garbage", 100); err == nil {
		t.Fatal("accepted garbage")
	}
}

// TestRelay drives the relay against a hybrid-vsock server that answers OK
// only for the right port and echoes bytes.
func TestRelay(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "v.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, len(ConnectLine(7)))
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != ConnectLine(7) {
					return
				}
				io.WriteString(c, "OK 1073741831\n")
				io.Copy(c, c)
			}()
		}
	}()
	r, err := StartRelay("", sock, 7)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through relay: %q %v", got, err)
	}
	c.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := DialVsock(ctx, sock, 8); err == nil {
		t.Fatal("wrong port got OK")
	}
}

// Poll's waits between tries back off from 2 ms, doubling, to 64 ms and
// stay there.
func TestPoll_BacksOffFrom2msTo64ms(t *testing.T) {
	next := pollBackoff.DelayFunc()
	var got []time.Duration
	for i := 0; i < 8; i++ {
		got = append(got, next())
	}
	want := []time.Duration{2, 4, 8, 16, 32, 64, 64, 64}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("Poll's waits %v, want %v ms", got, want)
		}
	}
}

// Poll returns once f succeeds, and at ctx's end with f's last error.
func TestPoll_RetriesUntilSuccessOrContextEnd(t *testing.T) {
	n := 0
	if err := Poll(context.Background(), func() error {
		if n++; n < 4 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 4 {
		t.Fatalf("Poll = %v after %d calls, want nil after 4", err, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := Poll(ctx, func() error { return errors.New("still down") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still down") {
		t.Fatalf("Poll at its deadline = %v", err)
	}
}
