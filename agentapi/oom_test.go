package agentapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// TestOOMKills_ReadsAGuestsAnswerOnlyUpToItsBound: the count comes from
// the guest, whose root may answer anything; OOMKills reads a few KiB of
// it, not the 64 MiB every other JSON answer may take; a longer
// answer is an error.
func TestOOMKills_ReadsAGuestsAnswerOnlyUpToItsBound(t *testing.T) {
	ask := func(pad int) (uint64, error) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			require.Equal(t, agentapi.OOMKillsPath, r.URL.Path)
			fmt.Fprint(w, `{"oom_kills": 3`)
			chunk := strings.Repeat(" ", 64<<10)
			for sent := 0; sent < pad; sent += len(chunk) {
				if _, err := fmt.Fprint(w, chunk); err != nil {
					return // the client stopped reading
				}
			}
			fmt.Fprint(w, `}`)
		}))
		defer srv.Close()
		return (&agentapi.Client{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: "t"}).OOMKills(context.Background())
	}
	n, err := ask(0)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	_, err = ask(1 << 20)
	require.Error(t, err, "an answer of 1 MiB was read to its end")
}
