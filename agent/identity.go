package agent

import (
	"encoding/json"
	"net/http"
	"os"
)

// IdentityPath is POST {"token":"..."}: it replaces the agent's access
// token. Like every endpoint but /health it needs the current token, so
// only the holder of the old identity can hand out a new one. A VMM
// backend calls it right after cloning a VM from a checkpoint, whose memory
// still holds the checkpointed guest's token (see vmm/qemu). With
// Options.TokenFile set, the new token is written there (atomically) before
// it takes effect, so an agent restarted from that file keeps it.
const IdentityPath = InternalPathPrefix + "identity"

// InternalPathPrefix starts the agent's paths that are for the node alone
// (IdentityPath): the e2b gateway answers 404 for them, so no client
// reaches them through its data plane or router, token or not.
const InternalPathPrefix = "/hearth/"

// token is the access token currently required (empty: none).
func (a *agent) token() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.o.Token
}

func (a *agent) handleIdentity(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Token string `json:"token"`
	}
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
