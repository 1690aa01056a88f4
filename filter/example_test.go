package filter_test

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/message"
)

func ExampleNew() {
	f, err := filter.New(filter.TypeSQL92, "price > 100 AND region = 'eu-west-1' OR vip IS NOT NULL")
	if err != nil {
		panic(err)
	}
	props := message.AppendProperty(message.AppendProperty(nil, "price", "129"), "region", "eu-west-1")
	fmt.Println(f.MatchTagCode(0), f.NeedsRecord(), f.MatchProperties(props))

	tags, _ := filter.New(filter.TypeTag, "TagA || TagB")
	tagged := message.AppendProperty(nil, message.PropTags, "TagA")
	fmt.Println(tags.MatchTagCode(message.TagCode([]byte("TagA"))), tags.MatchProperties(tagged))

	_, err = filter.New(filter.TypeSQL92, "price > 'cheap'")
	var pe *filter.ParseError
	fmt.Println(errors.As(err, &pe), pe.Pos)
	// Output:
	// true true true
	// true true
	// true 8
}
