package main

import (
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/remoting"
)

// innerSigner signs the broker's own requests with
// innerClientAuthenticationCredentials (RocketMQ 5.3's key): its
// registrations with name servers, a slave's requests to its master, and in
// controller mode its requests to the controllers and to the other members
// of its group. Nil when the key is not set: those requests go unsigned,
// and a peer under ACL refuses them (the broker logs an ERROR naming the
// key).
func innerSigner(c *config) remoting.Signer {
	if c.sec.innerCreds.IsEmpty() {
		return nil
	}
	return auth.NewSigner(c.sec.innerCreds)
}
