package nodeapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
)

// HTTPError is a non-2xx answer from a node.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("node answered %d: %s", e.Status, e.Message)
}

// Is lets errors.Is(err, ErrNoCapacity) match a 429,
// errors.Is(err, ErrNotFound) a 404 and errors.Is(err, ErrConflict) a 409.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case ErrNoCapacity:
		return e.Status == http.StatusTooManyRequests
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	}
	return false
}

// ErrNoCapacity matches a node's 429: it holds no warm VM for the key.
var ErrNoCapacity = errors.New("no warm capacity on this node")

// ErrNotFound matches a node's 404: it does not hold the sandbox or snapshot.
var ErrNotFound = errors.New("not found on this node")

// ErrConflict matches a node's 409: the claim ref is held by a live
// sandbox, a conditional update named a stale version, or the sandbox's
// state forbids the verb (a fork of a paused sandbox).
var ErrConflict = errors.New("conflict on this node")

// StatusOf returns the HTTP status a node answered with, or 0 when err is
// not a node answer.
func StatusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// NotDelivered reports whether err proves that the node did not act on the
// request: a capacity miss, a failure to connect, or a 5xx answer. A timeout
// or reset after the request was sent is not proof: the node may have acted.
func NotDelivered(err error) bool {
	if err == nil {
		return false
	}
	if s := StatusOf(err); s != 0 {
		return s == http.StatusTooManyRequests || s >= 500
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return false
}
