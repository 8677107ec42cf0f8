package envd

import (
	"encoding/json"
	"net/http"
)

// IdentityPath is POST {"token":"..."}: it replaces the agent's access
// token. Like every endpoint but /health it needs the current token, so
// only the holder of the old identity can hand out a new one. A VMM
// backend calls it right after cloning a VM from a checkpoint, whose memory
// still holds the checkpointed guest's token (see vmm/qemu).
const IdentityPath = "/hearth/identity"

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
	a.o.Token = req.Token
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
