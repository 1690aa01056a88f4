package core

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/apogeemq/apogee/message"
)

// GET_BROKER_RUNTIME_INFO's msgPutTotalTodayNow and msgGetTotalTodayNow
// count what producers sent and consumers pulled, from the same counters as
// the morning snapshots (so that now − morning is today's traffic, as the
// Java tools compute it); the store's own counts, internal messages
// included, are storePutMessages and storeGetMessages.
func TestRuntimeInfoTodayCountsClientTraffic(t *testing.T) {
	c := newTestCore(t, nil)
	var res SendResult
	for range 3 {
		if err := c.Send(sendReq("Today", 0, 100), &res); err != nil {
			t.Fatal(err)
		}
	}
	waitDispatched(t, c, "Today", 0, 3)
	var pr PullResult
	if err := c.Pull(&PullRequest{Group: []byte("g"), Topic: []byte("Today"), Offset: 0, MaxMsgs: 32, OwnSubscription: true}, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Status != PullFound || len(pr.Records) != 3 {
		t.Fatalf("pull: status %d, %d records", pr.Status, len(pr.Records))
	}
	first := int64(binary.BigEndian.Uint64(pr.Records[0][message.OffPhysicalOffset:]))
	pr.Release()
	// A send-back is an internal put: the store counts it, the broker's
	// put count does not (the Java broker counts it under SNDBCK_PUT_NUMS).
	if _, err := c.SendBack(&SendBackRequest{Group: "g", Offset: first, DelayLevel: 1}); err != nil {
		t.Fatal(err)
	}
	info := c.Admin().RuntimeInfo()
	// The store also counts the configuration records (the topic, the
	// group and its retry topic created on the way: configlog.go).
	for k, want := range map[string]string{
		"msgPutTotalTodayNow": "3", "msgGetTotalTodayNow": "3",
		"msgPutTotalTodayMorning": "0", "msgGetTotalTodayMorning": "0",
		"storePutMessages": strconv.FormatInt(4+c.Replication().ConfigLogStats().Appended, 10),
	} {
		if got := info[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}
