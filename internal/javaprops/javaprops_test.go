package javaprops

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	text := "# comment\n" +
		"  ! also a comment \\\n" +
		"\n" +
		"brokerClusterName = DefaultCluster\n" +
		"brokerName:broker-a\r\n" +
		"brokerId 0\n" +
		"\tdeleteWhen=04   \n" +
		"messageDelayLevel=1s 5s \\\n" +
		"    10s\n" +
		"key\\=with\\:escapes=a\\tb\\u0041\n" +
		"empty\n" +
		"brokerId=1\n" +
		"trailing=x\\"
	got, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Property{
		{Key: "brokerClusterName", Value: "DefaultCluster", Line: 4},
		{Key: "brokerName", Value: "broker-a", Line: 5},
		{Key: "deleteWhen", Value: "04", Line: 7},
		{Key: "messageDelayLevel", Value: "1s 5s 10s", Line: 8},
		{Key: "key=with:escapes", Value: "a\tbA", Line: 10},
		{Key: "empty", Value: "", Line: 11},
		// The last line wins, in its own place, and names the one it replaced.
		{Key: "brokerId", Value: "1", Line: 12, Replaced: []Property{{Key: "brokerId", Value: "0", Line: 6}}},
		{Key: "trailing", Value: "x", Line: 13}, // a continuation at the end of the file
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"a=\\u12x4\n", "a=\\u12\n"} {
		if _, err := Parse(bad); err == nil {
			t.Fatalf("a malformed \\u escape was accepted: %q", bad)
		}
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "namesrv.properties")
	if err := os.WriteFile(path, []byte("listenPort=9877\nbad=\\u00zz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error for a bad escape: %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestClosest(t *testing.T) {
	known := []string{"listenPort", "kvConfigPath", "bindAddress", "listenPorts"}
	for _, tc := range []struct{ key, want string }{
		{"listenport", "listenPort"}, // case only
		{"lisenPort", "listenPort"},
		{"kvConfPath", "kvConfigPath"},
		{"somethingElse", ""},
		{"listenPortss", "listenPorts"}, // one edit from listenPorts, two from listenPort
	} {
		if got := Closest(tc.key, known); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := Closest("abc", []string{"abd", "abe"}); got != "abd" {
		t.Errorf("tie: %q", got)
	}
	if got := Closest("abc", []string{"abe", "abd"}); got != "abd" {
		t.Errorf("tie, other order: %q", got)
	}
}
