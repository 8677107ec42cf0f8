package agent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnary_ValidationAnswers pins the error answers of request checks.
func TestUnary_ValidationAnswers(t *testing.T) {
	ta := startAgent(t, nil)
	for _, tc := range []struct {
		method string
		in     map[string]any
		status int
		want   rpcError
	}{
		{"filesystem.Filesystem/Stat", map[string]any{}, 400, rpcError{codeInvalidArgument, "path is required"}},
		{"filesystem.Filesystem/MakeDir", map[string]any{}, 400, rpcError{codeInvalidArgument, "path is required"}},
		{"filesystem.Filesystem/Remove", map[string]any{}, 400, rpcError{codeInvalidArgument, "path is required"}},
		{"filesystem.Filesystem/ListDir", map[string]any{"depth": 2}, 400, rpcError{codeInvalidArgument, "path is required"}},
		{"filesystem.Filesystem/Move", map[string]any{"source": "a"}, 400, rpcError{codeInvalidArgument, "source and destination are required"}},
		// The signal is checked before the process is looked up.
		{"process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 999999}}, 400, rpcError{codeInvalidArgument, "signal is required"}},
		{"process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 999999}, "signal": "SIGNAL_SIGKILL"}, 404, rpcError{codeNotFound, "process with pid 999999 not found"}},
		{"process.Process/SendInput", map[string]any{"process": map[string]any{"tag": "x"}}, 404, rpcError{codeNotFound, `process with tag "x" not found`}},
		{"process.Process/CloseStdin", map[string]any{"process": map[string]any{}}, 400, rpcError{codeInvalidArgument, "process selector needs pid or tag"}},
	} {
		var e rpcError
		require.Equal(t, tc.status, ta.unary(tc.method, tc.in, &e), tc.method)
		require.Equal(t, tc.want, e, tc.method)
	}
}
