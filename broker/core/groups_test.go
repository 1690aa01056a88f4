package core

import (
	"testing"
	"time"
)

func TestRetryPolicyDelays(t *testing.T) {
	p, err := parseRetryPolicy([]byte(`{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":1000,"max":60000,"multiplier":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int32]time.Duration{0: time.Second, 1: 2 * time.Second, 3: 8 * time.Second, 10: time.Minute, 100: time.Minute} {
		if got := p.delay(n); got != want {
			t.Errorf("exponential delay(%d) = %v, want %v", n, got, want)
		}
	}
	p, _ = parseRetryPolicy([]byte(`{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,5000,10000,30000]}}`))
	for n, want := range map[int32]time.Duration{0: 10 * time.Second, 1: 30 * time.Second, 9: 30 * time.Second} {
		if got := p.delay(n); got != want {
			t.Errorf("customized delay(%d) = %v, want %v", n, got, want)
		}
	}
	if p, err := parseRetryPolicy([]byte(`{"type":"CUSTOMIZED"}`)); p != nil || err != nil {
		t.Errorf("customized without next: %v %v", p, err)
	}
	for _, bad := range []string{`{"type":"LINEAR"}`, `{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[0]}}`, `[`} {
		if _, err := parseRetryPolicy([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestApplyTopicAttributes(t *testing.T) {
	got, err := applyTopicAttributes(map[string]string{"message.type": "FIFO"}, "+message.type=delay")
	if err != nil || got["message.type"] != "DELAY" {
		t.Fatalf("replace: %v %v", got, err)
	}
	if got, err := applyTopicAttributes(map[string]string{"message.type": "FIFO"}, "-message.type"); err != nil || got != nil {
		t.Fatalf("remove: %v %v", got, err)
	}
	for _, bad := range []string{"+color=red", "+message.type=SOMETIMES", "message.type", "+=x"} {
		if _, err := applyTopicAttributes(nil, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
