// Package claim owns the claim: the lease a Create asks for, its clamping on
// the node, and (in the router) the choice of the node that delivers a warm
// microVM.
//
// Lease derivation and clamping are pure functions of their inputs and a
// clock value; they perform no I/O. Errors are typed (*LeaseError) so the
// API layers map them to 400 without matching strings.
package claim
