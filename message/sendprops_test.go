package message

import (
	"errors"
	"testing"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// sendPropKeys is each SendProp's key.
var sendPropKeys = [numSendProps]string{
	SendUniqKey: PropUniqKey, SendWait: PropWait, SendTranMsg: PropTranMsg, SendDelay: PropDelay,
	SendTimerDeliverMS: PropTimerDeliverMS, SendTimerDelaySec: PropTimerDelaySec, SendTimerDelayMS: PropTimerDelayMS,
	SendJavaShardingKey: PropJavaShardingKey, SendPriority: PropPriority, SendTransactionID: PropTransactionID,
	SendProducerGroup: PropProducerGroup, SendLiteTopic: PropertyLiteTopic,
}

// checkSendProps says where Parse disagrees with ValidateProperties and
// LookupProperty, the per-key scans it replaces.
func checkSendProps(t *testing.T, props []byte) {
	t.Helper()
	var p SendProps
	p.Scan(props) // whatever props hold, Scan reads them as LookupProperty does
	for k := range numSendProps {
		v, ok := p.Get(k)
		if wv, wok := LookupProperty(props, sendPropKeys[k]); ok != wok || string(v) != string(wv) {
			t.Fatalf("%q: Scan: %s = %q %v, LookupProperty %q %v", props, sendPropKeys[k], v, ok, wv, wok)
		}
	}
	err := p.Parse(props)
	want := ValidateProperties(props)
	if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
		t.Fatalf("%q: Parse %v, ValidateProperties %v", props, err, want)
	}
	if err != nil {
		if !errors.Is(err, ErrBadProperty) && !errors.Is(err, ErrPropertiesTooLarge) {
			t.Fatalf("%q: %v is neither ErrBadProperty nor ErrPropertiesTooLarge", props, err)
		}
		if p.present != 0 {
			t.Fatalf("%q: a failed Parse left %b", props, p.present)
		}
		return
	}
	for k := range numSendProps {
		v, ok := p.Get(k)
		wv, wok := LookupProperty(props, sendPropKeys[k])
		if ok != wok || string(v) != string(wv) || p.Has(k) != wok {
			t.Fatalf("%q: %s = %q %v, LookupProperty %q %v", props, sendPropKeys[k], v, ok, wv, wok)
		}
		n, present, nok := p.Int(k)
		wn, wnok := javacompat.ParseInt64(wv)
		if present != wok || (wok && (nok != wnok || n != wn)) {
			t.Fatalf("%q: Int(%s) = %d %v %v", props, sendPropKeys[k], n, present, nok)
		}
		if p.HasAny(SendPropSet(k)) != wok {
			t.Fatalf("%q: HasAny(%s) = %v", props, sendPropKeys[k], !wok)
		}
	}
}

func TestSendPropsParse(t *testing.T) {
	for _, props := range []string{
		"",
		"UNIQ_KEY\x01C0A8\x02TAGS\x01a\x02KEYS\x01k\x02",
		"UNIQ_KEY\x01C0A8\x02TAGS\x01a", // no trailing separator
		"DELAY\x013\x02WAIT\x01false\x02",
		"DELAY\x01x\x02",               // not a number
		"DELAY\x013\x02DELAY\x015\x02", // the last wins
		"TRAN_MSG\x01true\x02PGROUP\x01pg\x02__transactionId__\x01tx\x02",
		"TIMER_DELIVER_MS\x011\x02TIMER_DELAY_SEC\x012\x02TIMER_DELAY_MS\x01\x02",
		"__SHARDINGKEY\x01s\x02_SYS_MSG_PRIORITY_\x017\x02",
		"UNIQ_KEYX\x01a\x02XUNIQ_KEY\x01b\x02UNIQ_KE\x01c\x02", // near misses
		"\x02",                // an empty item
		"\x01v\x02",           // an empty key
		"A\x01b\x01c\x02",     // two 0x01
		"TAGS\x01a\x02\x02",   // two separators in a row
		"TAGS\x01a\x02noPair", // an item without 0x01
		"DELAY\x013\x02bad",   // a failed parse leaves nothing
	} {
		checkSendProps(t, []byte(props))
	}
	big := make([]byte, MaxPropertiesSize+1)
	for i := range big {
		big[i] = 'a'
	}
	copy(big, "DELAY\x011\x02")
	checkSendProps(t, big)
}

func TestSendPropsIs(t *testing.T) {
	var p SendProps
	if err := p.Parse([]byte("WAIT\x01false\x02TRAN_MSG\x01TRUE\x02")); err != nil {
		t.Fatal(err)
	}
	if !p.Is(SendWait, "false") || p.Is(SendTranMsg, "true") || p.Is(SendDelay, "") {
		t.Error("Is")
	}
	if !p.HasAny(SendPropSet(SendDelay, SendWait)) || p.HasAny(SendPropSet(SendDelay, SendTimerDelayMS)) {
		t.Error("HasAny")
	}
	p.Reset()
	if p.Has(SendWait) || !noValues(&p) {
		t.Error("Reset kept a value")
	}
	// A parse after another keeps nothing of the first (Parse resets only
	// the values found before).
	if err := p.Parse([]byte("DELAY\x013\x02UNIQ_KEY\x01u\x02")); err != nil {
		t.Fatal(err)
	}
	if err := p.Parse([]byte("TAGS\x01a\x02")); err != nil || p.present != 0 || !noValues(&p) {
		t.Errorf("second parse: %v, %b %q", err, p.present, p.vals)
	}
}

func TestSendPropsDoesNotAllocate(t *testing.T) {
	props := []byte("UNIQ_KEY\x01C0A80001000000000000000000000001\x02TAGS\x01TagA\x02KEYS\x01k\x02DELAY\x013\x02")
	var p SendProps
	if n := testing.AllocsPerRun(1000, func() {
		if err := p.Parse(props); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := p.Int(SendDelay); !ok || !p.Has(SendUniqKey) {
			t.Fatal("lost DELAY or UNIQ_KEY")
		}
	}); n != 0 {
		t.Errorf("Parse allocates %v times", n)
	}
}

// FuzzSendProps: Parse agrees with ValidateProperties and LookupProperty on
// any input.
func FuzzSendProps(f *testing.F) {
	for _, s := range []string{
		"", "UNIQ_KEY\x01u\x02TAGS\x01a\x02", "DELAY\x013\x02DELAY\x01x", "\x02\x01", "WAIT\x01false",
		"TRAN_MSG\x01true\x02PGROUP\x01\x02__SHARDINGKEY\x01k\x02_SYS_MSG_PRIORITY_\x01-1\x02",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, props []byte) { checkSendProps(t, props) })
}

// BenchmarkSendPropsParse is the one pass of a send shaped as
// rocketmq-client-go sends it, against the lookups it replaces
// (validation, WAIT, TRAN_MSG, the timers, DELAY, __SHARDINGKEY, the
// priority, the delay properties again, UNIQ_KEY).
func BenchmarkSendPropsParse(b *testing.B) {
	props := []byte("UNIQ_KEY\x01C0A80001000000000000000000000001\x02TAGS\x01TagA\x02KEYS\x01k\x02")
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		var p SendProps
		for range b.N {
			if p.Parse(props) != nil {
				b.Fatal("bad")
			}
		}
	})
	b.Run("lookups", func(b *testing.B) {
		b.ReportAllocs()
		keys := []string{PropWait, PropTranMsg, PropTimerDeliverMS, PropTimerDelaySec, PropTimerDelayMS, PropDelay,
			PropJavaShardingKey, PropPriority, PropDelay, PropTimerDeliverMS, PropTimerDelaySec, PropTimerDelayMS, PropUniqKey}
		for range b.N {
			if ValidateProperties(props) != nil {
				b.Fatal("bad")
			}
			for _, k := range keys {
				LookupProperty(props, k)
			}
		}
	})
}

// noValues reports whether p holds no value (vals all nil).
func noValues(p *SendProps) bool {
	for _, v := range p.vals {
		if v != nil {
			return false
		}
	}
	return true
}
