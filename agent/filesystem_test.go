package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSymlinkTarget_IsTheResolvedAbsolutePath: like envd, an entry for a
// link carries where it finally leads, absolute, not the link's text.
func TestSymlinkTarget_IsTheResolvedAbsolutePath(t *testing.T) {
	ta := startAgent(t, nil)
	root, err := filepath.EvalSymlinks(ta.root)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ta.root, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ta.root, "d", "f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("d/f", filepath.Join(ta.root, "rel")))   // relative
	require.NoError(t, os.Symlink("rel", filepath.Join(ta.root, "chain"))) // a link to a link
	require.NoError(t, os.Symlink("nowhere", filepath.Join(ta.root, "dangling")))

	var st entryResponse
	for _, name := range []string{"rel", "chain"} {
		require.Equal(t, 200, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": name}, &st), name)
		require.Equal(t, fileTypeSymlink, st.Entry.Type, name)
		require.NotNil(t, st.Entry.SymlinkTarget, name)
		require.Equal(t, filepath.Join(root, "d", "f"), *st.Entry.SymlinkTarget, name)
	}
	require.Equal(t, 200, ta.unary("filesystem.Filesystem/Stat", map[string]any{"path": "dangling"}, &st))
	require.NotNil(t, st.Entry.SymlinkTarget)
	require.True(t, filepath.IsAbs(*st.Entry.SymlinkTarget), *st.Entry.SymlinkTarget)
	require.Equal(t, "nowhere", filepath.Base(*st.Entry.SymlinkTarget))
}
