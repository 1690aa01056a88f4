package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
)

// Environment variables that give the credentials without putting the
// secret on the command line (where ps shows it).
const (
	envAccessKey = "APOGEE_ADMIN_ACCESS_KEY"
	envSecretKey = "APOGEE_ADMIN_SECRET_KEY"
)

// securityFlags are every online command's options for a broker with
// access control or TLS on. mqadmin takes its credentials from
// conf/tools.yml and has no flags for them; these are Apogee's (as
// apogee-bench's).
type securityFlags struct {
	accessKey, secretKey *string
	tls, insecure        *bool
	ca, cert, key, name  *string
}

func addSecurityFlags(fs *pflag.FlagSet) *securityFlags {
	return &securityFlags{
		accessKey: fs.String("access-key", "", "sign every request as this user (access key; default $"+envAccessKey+")"),
		secretKey: fs.String("secret-key", "", "the user's secret key (default $"+envSecretKey+", which keeps it out of ps)"),
		tls:       fs.Bool("tls", false, "connect with TLS (a broker with --tls-mode permissive or enforcing)"),
		ca:        fs.String("tls-ca", "", "trust the server certificates of this CA (PEM; default: the system's); implies --tls"),
		cert:      fs.String("tls-cert", "", "client certificate for mutual TLS (PEM); implies --tls"),
		key:       fs.String("tls-key", "", "its key (PEM)"),
		name:      fs.String("tls-server-name", "", "the name to verify the server certificate against (default: the host dialled)"),
		insecure:  fs.Bool("tls-insecure", false, "do not verify the server certificate; implies --tls"),
	}
}

// options are the client options the flags ask for.
func (s *securityFlags) options() ([]client.AdminOpt, error) {
	var opts []client.AdminOpt
	ak, sk := *s.accessKey, *s.secretKey
	if ak == "" {
		ak = os.Getenv(envAccessKey)
	}
	if sk == "" {
		sk = os.Getenv(envSecretKey)
	}
	switch {
	case ak != "" && sk != "":
		opts = append(opts, client.Credentials(auth.Credentials{AccessKey: ak, SecretKey: sk}))
	case ak != "" || sk != "":
		return nil, fmt.Errorf("%w: give both --access-key and --secret-key (or $%s and $%s)", errUsage, envAccessKey, envSecretKey)
	}
	if *s.tls || *s.ca != "" || *s.cert != "" || *s.insecure {
		cfg, err := tlsconf.ClientConfig{CAFile: *s.ca, CertFile: *s.cert, KeyFile: *s.key, ServerName: *s.name, Insecure: *s.insecure}.Load()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		opts = append(opts, client.TLS(cfg))
	}
	return opts, nil
}
