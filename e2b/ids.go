package e2b

import (
	"encoding/hex"
	"net"
	"strings"

	"github.com/hearthvm/hearth/nodeapi"
)

// Pure cores of the gateway: id rendering and host routes (list filters
// and paging are in list.go).

// RenderID is a claim id as an e2b sandbox id: lowercased, with every
// rune outside [a-z0-9] dropped ("sb_1f2e" → "sb1f2e"), like e2b's own ids.
// It must be a DNS label (the SDK builds <port>-<id>.<domain> hosts) and
// must hold no '-': code written for e2b cuts a sandbox id at its first
// '-' (the "<id>-<clientId>" form of old) and expects the whole id back.
func RenderID(id string) string {
	clean := true
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			clean = false
			break
		}
	}
	if clean {
		return id
	}
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if r < 0x80 && idByte(byte(r)) {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return hex.EncodeToString([]byte(id)) // nothing left: still an id, and its own
	}
	return b.String()
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// MatchID reports whether a client-supplied id names the claim id raw: the
// raw id itself, its rendering, or the "sb-…" rendering of earlier releases
// (nodeapi.DNSName). Empty never matches.
func MatchID(raw, given string) bool {
	if raw == "" || given == "" {
		return false
	}
	return given == raw || given == RenderID(raw) || given == nodeapi.DNSName(raw)
}

// idCandidates lists the claim ids a client-supplied id may stand for,
// most likely first: the id as given, then the node's "sb_" spelling of a
// rendered "sb…" id (or of the "sb-…" rendering of earlier releases).
func idCandidates(given string) []string {
	out := []string{given}
	if rest, ok := strings.CutPrefix(given, "sb"); ok && !strings.HasPrefix(rest, "_") {
		if rest = strings.TrimPrefix(rest, "-"); rest != "" {
			out = append(out, "sb_"+rest)
		}
	}
	return out
}

// HostRoute parses e2b's sandbox host "<port>-<sandboxId>.<domain>" (an
// optional ":port" of the listener ignored, case-insensitive). ok is false
// for any other host, and always when domain is empty.
func HostRoute(host, domain string) (id, port string, ok bool) {
	if domain == "" {
		return "", "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	label, ok := strings.CutSuffix(host, "."+strings.ToLower(domain))
	if !ok || strings.Contains(label, ".") {
		return "", "", false
	}
	port, id, ok = strings.Cut(label, "-")
	if !ok || id == "" || port == "" || len(port) > 5 {
		return "", "", false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", "", false
		}
	}
	return id, port, true
}
