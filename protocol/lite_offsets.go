package protocol

import "encoding/json"

// LiteConsumerOffsetsRequest is the body of
// APOGEE_GET_LITE_CONSUMER_OFFSETS (an Apogee-only request a slave sends
// its master): the offsets changed after change number Since of the
// master's run Epoch (0, 0 at first), at most Limit of them.
type LiteConsumerOffsetsRequest struct {
	Epoch int64  `json:"epoch"`
	Since uint64 `json:"since"`
	Limit int    `json:"limit"`
}

// LiteConsumerOffset is one lite consumer offset: group's offset in the
// lite topic Lite of parent topic Parent, and its change number.
type LiteConsumerOffset struct {
	Group  string `json:"group"`
	Parent string `json:"parent"`
	Lite   string `json:"lite"`
	Offset int64  `json:"offset"`
	Seq    uint64 `json:"seq"`
}

// LiteConsumerOffsetsBody is the answer: the master's epoch (when it is
// not the request's, the page starts from change number 0), the offsets in
// change order, and whether more remain after the last one.
type LiteConsumerOffsetsBody struct {
	Epoch   int64                `json:"epoch"`
	Offsets []LiteConsumerOffset `json:"offsets"`
	More    bool                 `json:"more"`
}

// Encode returns the JSON body.
func (b *LiteConsumerOffsetsBody) Encode() ([]byte, error) { return json.Marshal(b) }

// Decode parses a JSON body.
func (b *LiteConsumerOffsetsBody) Decode(data []byte) error { return json.Unmarshal(data, b) }
