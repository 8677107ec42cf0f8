package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// HTTPStatus is the one mapping of a fleet or node error to the HTTP status
// both API surfaces answer with:
//
//	nil                                   200
//	no warm capacity, node 503            503 (retryable)
//	node 429: a quota (fork depth or       429 (not retryable until the
//	  tree, non-pool VMs, snapshot bytes)    caller frees something)
//	ErrNotFound, node 404                  404
//	node 409                               409
//	bad key or lease, node 400/413/422     400
//	deadline exceeded                      504
//	node unreachable or hung up (no HTTP   503 (retryable; a claim's
//	  answer), claim in doubt                outcome: ErrOutcomeUnknown)
//	anything else                          500
func HTTPStatus(err error) int {
	var noCap *ErrNoWarmCapacity
	var lease *LeaseError
	var doubt *ErrClaimInDoubt
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &noCap), errors.As(err, &doubt):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, pool.ErrInvalidKey), errors.As(err, &lease):
		return http.StatusBadRequest
	}
	switch s := nodeapi.StatusOf(err); s {
	case 0:
	case http.StatusTooManyRequests:
		// A node's "no warm microVM" 429 never gets here: routing turns it
		// into ErrNoWarmCapacity. What does is a quota the caller reached.
		return http.StatusTooManyRequests
	case http.StatusServiceUnavailable:
		return http.StatusServiceUnavailable
	case http.StatusNotFound, http.StatusConflict:
		return s
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	if unreachable(err) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// unreachable reports a transport failure talking to a node: no HTTP
// answer at all (a refused or broken connection, a hang-up mid-request: a
// node killed or restarting). Such an error is the node's unavailability,
// not the server's fault (a 503, never a 500).
func unreachable(err error) bool {
	var out *ErrOutcomeUnknown
	var nerr net.Error
	var uerr *url.Error
	return errors.As(err, &out) || errors.As(err, &nerr) || errors.As(err, &uerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// nodeErr normalizes a node's answer: a 404 becomes ErrNotFound (keeping
// the node's message).
func nodeErr(err error) error {
	if err != nil && nodeapi.StatusOf(err) == http.StatusNotFound {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
