package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFiles_XMetadataIsKeptAndReported(t *testing.T) {
	ta := startAgent(t, nil)
	resp := ta.do("POST", "/files?path=md/f.txt", "application/octet-stream", strings.NewReader("x"),
		map[string]string{"X-Metadata-Origin": "test", "X-Metadata-k2": "v2"})
	require.Equal(t, 200, resp.StatusCode)
	var written []writeInfo
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&written))
	if len(written) == 1 && written[0].Metadata == nil {
		t.Skip("the test file system keeps no user xattrs")
	}
	want := map[string]string{"origin": "test", "k2": "v2"}
	require.Equal(t, want, written[0].Metadata)
	var st entryResponse
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": "md/f.txt"}, &st))
	require.Equal(t, want, st.Entry.Metadata)
	var ls struct {
		Entries []entryInfo `json:"entries"`
	}
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/ListDir", map[string]any{"path": "md"}, &ls))
	require.Equal(t, want, ls.Entries[0].Metadata)
}

// TestFiles_AWriteReplacesTheMetadata: envd's semantics — a write's
// metadata is the file's whole metadata, and a write with none clears it.
func TestFiles_AWriteReplacesTheMetadata(t *testing.T) {
	ta := startAgent(t, nil)
	write := func(hdr map[string]string) map[string]string {
		t.Helper()
		resp := ta.do("POST", "/files?path=md/g.txt", "application/octet-stream", strings.NewReader("x"), hdr)
		require.Equal(t, 200, resp.StatusCode)
		var written []writeInfo
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&written))
		require.Len(t, written, 1)
		return written[0].Metadata
	}
	if write(map[string]string{"X-Metadata-Author": "a", "X-Metadata-Keep": "1"}) == nil {
		t.Skip("the test file system keeps no user xattrs")
	}
	require.Equal(t, map[string]string{"author": "b"}, write(map[string]string{"X-Metadata-Author": "b"}))
	require.Nil(t, write(nil), "a write without metadata clears it")
	var st entryResponse
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": "md/g.txt"}, &st))
	require.Nil(t, st.Entry.Metadata)
}
