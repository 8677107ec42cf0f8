package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// What the agent creates for a request belongs to the request's account,
// as with envd: the account's own commands can then use it.
func TestFiles_WhatTheAgentCreatesBelongsToTheAccount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	acct, err := lookupAccount("nobody")
	if err != nil {
		t.Skip("no nobody account")
	}
	ta := startAgent(t, func(o *Options) { o.User = "nobody" })
	resp := ta.do("POST", "/files?path=own/sub/f.txt", "application/octet-stream", strings.NewReader("x"), nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/MakeDir", map[string]any{"path": "own/made"}, nil))
	for _, p := range []string{"own", "own/sub", "own/sub/f.txt", "own/made"} {
		fi, err := os.Lstat(filepath.Join(ta.root, p))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, acct.uid, st.Uid, p)
	}
}

// /files?username= follows envd: a relative (or "~") path resolves against
// that user's home (root → /root; a user without one → Options.Root), what
// is created belongs to that user, downloads resolve the same way, and a
// user the guest lacks is a 400. Filesystem RPCs resolve against the home
// of the user the SDK names in Authorization: Basic.
func TestFiles_UsernameResolvesAgainstThatUsersHomeAndOwnsTheFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	nobody, err := lookupAccount("nobody")
	if err != nil {
		t.Skip("no nobody account")
	}
	rootAcct, err := lookupAccount("root")
	if err != nil || rootAcct.home == "" {
		t.Skip("no root account with a home")
	}
	if fi, err := os.Stat(rootAcct.home); err != nil || !fi.IsDir() {
		t.Skip("root's home is not a directory")
	}
	ta := startAgent(t, nil)
	rel := "hearth-agent-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.RemoveAll(filepath.Join(rootAcct.home, rel)) })

	resp := ta.do("POST", "/files?username=root&path="+rel+"/f.txt", "application/octet-stream", strings.NewReader("as root"), nil)
	require.Equal(t, 200, resp.StatusCode)
	var written []writeInfo
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&written))
	require.Equal(t, filepath.Join(rootAcct.home, rel, "f.txt"), written[0].Path)
	b, err := os.ReadFile(filepath.Join(rootAcct.home, rel, "f.txt"))
	require.NoError(t, err)
	require.Equal(t, "as root", string(b))

	resp = ta.do("GET", "/files?username=root&path=~/"+rel+"/f.txt", "", nil, nil)
	require.Equal(t, 200, resp.StatusCode)
	b, _ = io.ReadAll(resp.Body)
	require.Equal(t, "as root", string(b))
	// Without the username the same relative path is Options.Root's.
	require.Equal(t, 404, ta.do("GET", "/files?path="+rel+"/f.txt", "", nil, nil).StatusCode)

	// nobody has no home: its relative paths are Options.Root's, and
	// what it writes is its own.
	resp = ta.do("POST", "/files?username=nobody&path=by-nobody/f.txt", "application/octet-stream", strings.NewReader("x"), nil)
	require.Equal(t, 200, resp.StatusCode)
	for _, p := range []string{"by-nobody", "by-nobody/f.txt"} {
		fi, err := os.Lstat(filepath.Join(ta.root, p))
		require.NoError(t, err)
		require.Equal(t, nobody.uid, fi.Sys().(*syscall.Stat_t).Uid, p)
	}

	resp = ta.do("POST", "/files?username=no-such-user&path=x", "application/octet-stream", strings.NewReader("x"), nil)
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, 400, ta.do("GET", "/files?username=no-such-user&path=x", "", nil, nil).StatusCode)

	// The RPCs: Stat of the relative path as root (Basic auth) is /root's.
	basicRoot := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))}
	body, _ := json.Marshal(map[string]any{"path": rel + "/f.txt"})
	resp = ta.do("POST", "/filesystem.Filesystem/Stat", "application/json", bytes.NewReader(body), basicRoot)
	require.Equal(t, 200, resp.StatusCode)
	var st struct {
		Entry entryInfo `json:"entry"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	require.Equal(t, filepath.Join(rootAcct.home, rel, "f.txt"), st.Entry.Path)
}
