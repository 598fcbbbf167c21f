// Package h1 is the gateway's lean HTTP/1.1 wire layer: it parses request
// and response heads in place (slices into the reader's buffer, no maps, no
// allocation) and copies bodies framed by Content-Length, chunked encoding
// or the connection's end. It serves the common case fast; anything it does
// not handle (HTTP/2, upgrades, chunked uploads, HTTP/1.0 clients) the
// gateway hands to net/http.
package h1
