package main

import (
	"testing"
)

func TestSecurityConfig(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		lines []string
		acl   bool
		file  string
	}{
		{nil, nil, false, ""},
		{[]string{"--acl"}, nil, true, ""},
		{[]string{"--acl-file", "/etc/acl.yml"}, nil, true, "/etc/acl.yml"},
		{nil, []string{"aclEnable=true"}, true, ""},
		{nil, []string{"authenticationEnabled=true", "authorizationEnabled=true"}, true, ""},
		{nil, []string{"aclEnable=false"}, false, ""},
		{nil, []string{"aclFile=/x/plain_acl.yml"}, true, "/x/plain_acl.yml"},
		{[]string{"--acl-file", "/flag.yml"}, []string{"aclFile=/file.yml"}, true, "/flag.yml"},
	} {
		args := tc.args
		if tc.lines != nil {
			args = append(args, "--config", writeConf(t, tc.lines...))
		}
		c, err := parseConfig(args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if c.sec.acl != tc.acl || c.sec.aclFile != tc.file {
			t.Errorf("%v %v: acl %v file %q, want %v %q", tc.args, tc.lines, c.sec.acl, c.sec.aclFile, tc.acl, tc.file)
		}
	}
}
