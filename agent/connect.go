package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Connect protocol (JSON codec only) as the e2b SDK speaks it: unary calls
// are plain JSON bodies; server streams are envelopes [flags][len BE][json]
// with a final frame flagged endStreamFlag.

const (
	compressedFlag = 0x01
	endStreamFlag  = 0x02

	// maxMessage bounds one request message (envelope or unary body).
	maxMessage = 4 << 20

	contentTypeJSON        = "application/json"
	contentTypeConnectJSON = "application/connect+json"
)

// Connect error codes the agent uses.
const (
	codeCanceled           = "canceled"
	codeUnknown            = "unknown"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
	codeUnauthenticated    = "unauthenticated"
)

// rpcError is a Connect error: a code name and a message.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus maps a Connect code to the HTTP status of a unary error.
func httpStatus(code string) int {
	switch code {
	case codeCanceled:
		return 499
	case codeInvalidArgument, codeFailedPrecondition:
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// asRPCError turns any error into a Connect error.
func asRPCError(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	return &rpcError{Code: codeInternal, Message: err.Error()}
}

// writeUnaryError writes a Connect unary error.
func writeUnaryError(w http.ResponseWriter, err error) {
	re := asRPCError(err)
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(httpStatus(re.Code))
	_ = json.NewEncoder(w).Encode(re)
}

// writeUnary writes a Connect unary success.
func writeUnary(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// readEnvelope reads one Connect envelope. It rejects compressed messages
// and messages larger than max.
func readEnvelope(r io.Reader, max int) (flags byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, errorf(codeInvalidArgument, "truncated envelope header")
		}
		return 0, nil, err
	}
	flags = hdr[0]
	if flags&compressedFlag != 0 {
		return 0, nil, errorf(codeInternal, "compressed messages are not supported")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(max) {
		return 0, nil, errorf(codeInvalidArgument, "message of %d bytes exceeds the %d byte limit", n, max)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, errorf(codeInvalidArgument, "truncated envelope: %v", err)
	}
	return flags, payload, nil
}

// appendEnvelope appends one envelope to dst.
func appendEnvelope(dst []byte, flags byte, payload []byte) []byte {
	dst = append(dst, flags, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(payload)))
	return append(dst, payload...)
}

// decodeJSON decodes a proto3-JSON message strictly enough to reject
// garbage but tolerant of unknown fields (newer SDKs add some).
func decodeJSON(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		b = []byte("{}")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(codeInvalidArgument, "malformed request: %v", err)
	}
	return nil
}

// readUnary reads a unary Connect request body into v.
func readUnary(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, contentTypeJSON) {
		return errorf(codeInvalidArgument, "unsupported content type %q (only JSON is served)", ct)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err != nil {
		return errorf(codeInvalidArgument, "reading request: %v", err)
	}
	if len(b) > maxMessage {
		return errorf(codeInvalidArgument, "request exceeds %d bytes", maxMessage)
	}
	return decodeJSON(b, v)
}

// decodeUnary reads a unary request into req and, when req has a validate
// method, checks it; on failure it writes the Connect error and returns false.
func decodeUnary(w http.ResponseWriter, r *http.Request, req any) bool {
	err := readUnary(r, req)
	if v, ok := req.(interface{ validate() error }); ok && err == nil {
		err = v.validate()
	}
	if err != nil {
		writeUnaryError(w, err)
		return false
	}
	return true
}

// readStreamRequest reads the single enveloped request of a server stream.
func readStreamRequest(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentTypeConnectJSON) {
		return errorf(codeInvalidArgument, "unsupported content type %q (want %s)", ct, contentTypeConnectJSON)
	}
	_, payload, err := readEnvelope(r.Body, maxMessage)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errorf(codeInvalidArgument, "missing request message")
		}
		return err
	}
	return decodeJSON(payload, v)
}

// flexUint is a proto3-JSON integer: a number or a decimal string.
type flexUint uint64

func (f *flexUint) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" {
		*f = 0
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not an unsigned integer: %s", b)
	}
	*f = flexUint(n)
	return nil
}

// stream writes server-stream envelopes, flushing each one.
type stream struct {
	w       http.ResponseWriter
	flusher http.Flusher
	started bool
	buf     []byte
}

// newStream starts a server stream. The caller must defer drainBody(r).
func newStream(w http.ResponseWriter) *stream {
	// Stream while the request body may still be open (a proxy in front
	// forwards it chunked): without full duplex the server would block on
	// draining it before the first frame leaves.
	_ = http.NewResponseController(w).EnableFullDuplex()
	f, _ := w.(http.Flusher)
	return &stream{w: w, flusher: f}
}

// drainBody reads what is left of a full-duplex request body before the
// handler returns. Left for net/http to drain after the handler, the end of
// the body would start a background read that races with the next request
// on the connection ("invalid concurrent Body.Read call").
func drainBody(r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxMessage))
}

// openStream starts a server stream, reads its request into req and applies
// Connect-Timeout-Ms; on failure it ends the stream with the error and returns
// ok false. The caller must defer drainBody(r) and, on success, cancel.
func openStream(w http.ResponseWriter, r *http.Request, req any) (st *stream, ctx context.Context, cancel context.CancelFunc, ok bool) {
	st = newStream(w)
	if err := readStreamRequest(r, req); err != nil {
		_ = st.end(err)
		return nil, nil, nil, false
	}
	ctx, cancel, err := streamContext(r)
	if err != nil {
		_ = st.end(err)
		return nil, nil, nil, false
	}
	return st, ctx, cancel, true
}

func (s *stream) begin() {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", contentTypeConnectJSON)
	s.w.WriteHeader(http.StatusOK)
}

// send writes one message frame.
func (s *stream) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.frame(0, b)
}

func (s *stream) frame(flags byte, payload []byte) error {
	s.begin()
	s.buf = appendEnvelope(s.buf[:0], flags, payload)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// end writes the end-of-stream frame, carrying err when not nil.
func (s *stream) end(err error) error {
	if err == nil {
		return s.frame(endStreamFlag, []byte("{}"))
	}
	b, _ := json.Marshal(struct {
		Error    *rpcError         `json:"error"`
		Metadata map[string]string `json:"metadata"`
	}{asRPCError(err), map[string]string{}})
	return s.frame(endStreamFlag, b)
}
