package main

import (
	"context"
	"net"
	"strconv"
	"time"
)

// reachesSelf reports whether the name-server address addr ("host:port")
// leads to one of own, the addresses this process listens on (the broker's,
// which answers name-server requests too, and the embedded name server's).
// RocketMQ users write namesrvAddr=127.0.0.1:9876 in broker.conf, which here
// names the broker's own embedded name server: registering with it over the
// network would only repeat what the broker does in memory, and unregistering
// at shutdown would race with that listener's own stop.
//
// addr reaches a listener when the ports are equal and the host is the
// listener's own IP, or, for a listener on every interface (0.0.0.0 or ::),
// when the host is a loopback address, the unspecified address (which
// connects to the local host) or one of local, the host's own addresses. A
// host name is resolved (with a short timeout); one resolved address that
// reaches a listener is enough.
func reachesSelf(addr string, own []*net.TCPAddr, local []net.IP) bool {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		as, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return false
		}
		for _, a := range as {
			ips = append(ips, a.IP)
		}
	}
	for _, l := range own {
		if l.Port != port {
			continue
		}
		for _, ip := range ips {
			if l.IP.Equal(ip) {
				return true
			}
			if l.IP == nil || l.IP.IsUnspecified() {
				if ip.IsLoopback() || ip.IsUnspecified() || containsIP(local, ip) {
					return true
				}
			}
		}
	}
	return false
}

// localIPs returns the addresses of the host's interfaces.
func localIPs() []net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}
