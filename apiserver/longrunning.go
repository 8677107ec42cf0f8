package apiserver

import (
	"net/http"
	"strconv"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// longRunning is next (the generic server's check: watches) and a
// followed sandbox log — GET sandboxes/{name}/log?follow=true, which
// streams for as long as its client reads — so that the request timeout
// (--request-timeout, 60 s) does not cut it and it holds no in-flight
// seat, as kube-apiserver treats pods/log. Its bound is the node's (429
// past its follows per sandbox and per node). A log read without follow
// stays a short request.
func longRunning(next apirequest.LongRunningRequestCheck) apirequest.LongRunningRequestCheck {
	return func(r *http.Request, ri *apirequest.RequestInfo) bool {
		if ri != nil && ri.IsResourceRequest && ri.Resource == "sandboxes" && ri.Subresource == "log" {
			if follow, err := strconv.ParseBool(r.URL.Query().Get("follow")); err == nil && follow {
				return true
			}
		}
		return next != nil && next(r, ri)
	}
}
