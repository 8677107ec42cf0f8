package agent

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"os"
	"strconv"

	"github.com/hearthvm/hearth/agentapi"
)

// GET agentapi.OOMKillsPath answers the guest kernel's OOM kill count:
// the oom_kill line of /proc/vmstat, the processes the kernel's OOM
// killer killed since the guest booted (the VMM driver turns it into
// vmm.OOMCounter's count). The file is the kernel's own, never a path a
// tenant names.

// vmstatPath is the kernel's counters file the agent reads.
const vmstatPath = "/proc/vmstat"

// errNoOOMKill: the kernel's vmstat has no oom_kill counter (before 4.13).
var errNoOOMKill = errors.New("the kernel's vmstat has no oom_kill counter")

// oomKillsHandler serves OOMKillsPath from the vmstat file at path.
func oomKillsHandler(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := readOOMKills(path)
		if errors.Is(err, errNoOOMKill) {
			writeRESTError(w, http.StatusNotImplemented, err.Error())
			return
		}
		if err != nil {
			writeRESTError(w, http.StatusInternalServerError, "reading the OOM kill count: "+err.Error())
			return
		}
		writeJSONStatus(w, http.StatusOK, agentapi.OOMKills{OOMKills: n})
	}
}

// readOOMKills reads the oom_kill counter of the vmstat file at path.
func readOOMKills(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseVMStatOOMKill(b)
}

// parseVMStatOOMKill returns the value of vmstat's "oom_kill N" line
// ("name value" lines); errNoOOMKill when there is none, an error when its
// value is not a count.
func parseVMStatOOMKill(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(bytes.TrimSpace(sc.Bytes()), []byte(" "))
		if !ok || string(k) != "oom_kill" {
			continue
		}
		return strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoOOMKill
}
