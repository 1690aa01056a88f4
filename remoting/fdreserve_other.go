//go:build !unix

package remoting

import "errors"

var errNoRlimit = errors.New("remoting: no RLIMIT_NOFILE on this system")

func raiseNoFile() (int64, error) { return 0, errNoRlimit }

func softNoFile() (int64, error) { return 0, errNoRlimit }

func openFDs() (int, error) { return 0, errNoRlimit }
