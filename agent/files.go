package agent

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hearthvm/hearth/agentapi"
)

// envd REST: GET/POST /files and POST /init. Errors are JSON
// {"code":<http status>,"message":"..."}.

type restError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeRESTError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(restError{Code: status, Message: msg})
}

// restStatus maps a filesystem error to an HTTP status.
func restStatus(err error) int {
	re := asRPCError(err)
	if re.Code == codeAlreadyExists {
		return http.StatusBadRequest
	}
	return httpStatus(re.Code)
}

type writeInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (a *agent) handleGetFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("path")
	if q == "" {
		writeRESTError(w, http.StatusBadRequest, "the path query parameter is required")
		return
	}
	if err := checkPath(q); err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	acct, err := a.filesAccount(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	p := a.resolve(q, acct)
	f, err := os.Open(p)
	if err != nil {
		writeRESTError(w, restStatus(fsError(p, err)), asRPCError(fsError(p, err)).Message)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeRESTError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if fi.IsDir() {
		writeRESTError(w, http.StatusBadRequest, "path "+p+" is a directory")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

// filesAccount is the account of a /files request: the user its username
// query names (envd: relative paths resolve against that user's home, and
// what is created belongs to that user; unknown is a 400), else the
// request's processAccount — but for a signed URL used without the token,
// the default account: the signature covers the username query, not
// Authorization, which its holder could otherwise set to any user.
func (a *agent) filesAccount(r *http.Request) (*account, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		if r.Header.Get(agentapi.AccessTokenHeader) == "" && agentapi.HasFileSignature(r) {
			return a.defaultAccount()
		}
		return a.processAccount(r)
	}
	acct, err := lookupAccount(name)
	if err != nil {
		return nil, errorf(codeInvalidArgument, "username %q: %v", name, err)
	}
	return acct, nil
}

// writeFile stores body at path p, creating parent directories; what it
// creates belongs to acct (see owner.go).
func writeFile(p string, body io.Reader, acct *account) error {
	if err := mkdirAllAs(filepath.Dir(p), acct); err != nil {
		return fsError(filepath.Dir(p), err)
	}
	_, statErr := os.Lstat(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fsError(p, err)
	}
	if statErr != nil {
		chownTo(p, acct)
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return errorf(codeInternal, "writing %s: %v", p, err)
	}
	if err := f.Close(); err != nil {
		return fsError(p, err)
	}
	return nil
}

func (a *agent) handlePostFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("path")
	if err := checkPath(q); err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		mt = "application/octet-stream"
	}
	acct, err := a.filesAccount(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	md, err := metadataFromHeaders(r.Header)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	var written []writeInfo
	switch {
	case strings.HasPrefix(mt, "multipart/"):
		written, err = a.writeMultipart(r, q, acct)
	default:
		if q == "" {
			writeRESTError(w, http.StatusBadRequest, "the path query parameter is required for an octet-stream upload")
			return
		}
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			zr, zerr := gzip.NewReader(r.Body)
			if zerr != nil {
				writeRESTError(w, http.StatusBadRequest, "invalid gzip body: "+zerr.Error())
				return
			}
			defer zr.Close()
			body = zr
		default:
			writeRESTError(w, http.StatusBadRequest, "unsupported Content-Encoding "+strconv.Quote(enc))
			return
		}
		p := a.resolve(q, acct)
		if err = writeFile(p, body, acct); err == nil {
			written = []writeInfo{{Name: filepath.Base(p), Type: "file", Path: p}}
		}
	}
	for i := 0; err == nil && i < len(written); i++ {
		if err = setMetadata(written[i].Path, md); err == nil {
			written[i].Metadata = readMetadata(written[i].Path)
		}
	}
	if err != nil {
		writeRESTError(w, restStatus(err), asRPCError(err).Message)
		return
	}
	if len(written) == 0 {
		writeRESTError(w, http.StatusBadRequest, `no "file" part in the multipart body`)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	_ = json.NewEncoder(w).Encode(written)
}

// writeMultipart stores every "file" part: at the path query when given,
// else at the part's filename (the SDK sends the full destination path).
func (a *agent) writeMultipart(r *http.Request, q string, acct *account) ([]writeInfo, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, errorf(codeInvalidArgument, "invalid multipart body: %v", err)
	}
	var out []writeInfo
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, errorf(codeInvalidArgument, "invalid multipart body: %v", err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		// Part.FileName strips directories; the SDK's filename is a path.
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		target := q
		if target == "" {
			target = params["filename"]
		}
		if target == "" {
			part.Close()
			return nil, errorf(codeInvalidArgument, "a file part has no filename and no path query was given")
		}
		p := a.resolve(target, acct)
		err = writeFile(p, part, acct)
		part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, writeInfo{Name: filepath.Base(p), Type: "file", Path: p})
	}
}

func (a *agent) handleInit(w http.ResponseWriter, r *http.Request) {
	if a.applyInit(w, r) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// applyInit adds the env of r's agentapi.InitRequest to later processes;
// on a bad body it answers 400 and reports false.
func (a *agent) applyInit(w http.ResponseWriter, r *http.Request) bool {
	var req agentapi.InitRequest
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err == nil && len(b) > maxMessage {
		err = errors.New("body too large")
	}
	if err == nil {
		err = decodeJSON(b, &req)
	}
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return false
	}
	a.mu.Lock()
	for k, v := range req.EnvVars {
		a.initEnv[k] = v
	}
	a.mu.Unlock()
	a.saveOpened()
	return true
}
