package main

import (
	"testing"
	"time"
)

// TestTruncatedRetentionConfig: the keys and flags of what a replica's
// truncations keep reach the store's options (unset, the store's defaults:
// 7 days, 1 GiB); 0 bytes keeps nothing; a flag wins over its key.
func TestTruncatedRetentionConfig(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.store.TruncatedRetention != 0 || c.store.TruncatedMaxBytes != 0 {
		t.Fatalf("defaults %v %d, want the store's (zero)", c.store.TruncatedRetention, c.store.TruncatedMaxBytes)
	}
	conf := writeConf(t, "truncatedFileReservedTime=48", "truncatedMaxBytes=0")
	if c, err = parseConfig([]string{"-c", conf}); err != nil {
		t.Fatal(err)
	}
	if c.store.TruncatedRetention != 48*time.Hour || c.store.TruncatedMaxBytes != -1 {
		t.Fatalf("from the file: %v %d", c.store.TruncatedRetention, c.store.TruncatedMaxBytes)
	}
	if c, err = parseConfig([]string{"-c", conf, "--truncated-retention", "2h", "--truncated-max-bytes", "5000"}); err != nil {
		t.Fatal(err)
	}
	if c.store.TruncatedRetention != 2*time.Hour || c.store.TruncatedMaxBytes != 5000 {
		t.Fatalf("flags over the file: %v %d", c.store.TruncatedRetention, c.store.TruncatedMaxBytes)
	}
	for _, bad := range [][]string{
		{"--truncated-retention", "0s"},
		{"--truncated-max-bytes", "-1"},
		{"-c", writeConf(t, "truncatedMaxBytes=-5")},
		{"-c", writeConf(t, "truncatedFileReservedTime=0")},
	} {
		if _, err := parseConfig(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
