//go:build !unix

package tlsconf

import "net"

// peekTCP cannot peek here: the caller reads the byte through a buffer.
func peekTCP(net.Conn) (byte, bool, error) { return 0, false, nil }
