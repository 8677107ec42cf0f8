package agent

import (
	"encoding/json"
	"net/http"
	"os"

	"github.com/hearthvm/hearth/agentapi"
)

// POST agentapi.IdentityPath replaces the agent's access token (see
// there); with Options.TokenFile set, the new token is written there
// (atomically) before it takes effect, so an agent restarted from that
// file keeps it.

// token is the access token currently required (empty: none).
func (a *agent) token() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.o.Token
}

func (a *agent) handleIdentity(w http.ResponseWriter, r *http.Request) {
	var req agentapi.IdentityRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Token == "" {
		writeRESTError(w, http.StatusBadRequest, "body must be {\"token\":\"<non-empty>\"}")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.o.TokenFile != "" {
		if err := writeFileAtomic(a.o.TokenFile, []byte(req.Token)); err != nil {
			writeRESTError(w, http.StatusInternalServerError, "persisting the token: "+err.Error())
			return
		}
	}
	a.o.Token = req.Token
	w.WriteHeader(http.StatusNoContent)
}

// writeFileAtomic replaces path with b (mode 0600) through a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
