// Package loopback tells a listen address that reaches only this machine
// from one that reaches the network: the servers refuse to start on the
// latter without a token.
package loopback

import "net"

// Is reports whether a listen host is localhost or a loopback address. An
// empty host listens on every interface, so it is not.
func Is(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
