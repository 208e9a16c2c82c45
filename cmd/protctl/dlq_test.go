package main

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// deadLetterOf reads a dead-letter stream entry as protctl does.
func deadLetterOf(m redis.XMessage) broker.DeadLetter {
	fields := make(map[string]string, len(m.Values))
	for k, v := range m.Values {
		fields[k] = fmt.Sprint(v)
	}
	return broker.ParseDeadLetter(fields)
}

// jsonEqual reports whether a and b are the same JSON value (member order
// and blanks aside).
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
