package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy/redis"
)

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name           string
		cfg            redis.Config
		field, key, in string
	}{
		{"prefix", redis.Config{Prefix: "a}"}, "Prefix", "prefix", `"a}"`},
		{"shards", redis.Config{Shards: 5000}, "Shards", "shards", "5000"},
		{"ttl margin", redis.Config{TTLMargin: time.Microsecond}, "TTLMargin", "ttl_margin", "1µs"},
		{"lane ttl", redis.Config{LaneTTL: time.Millisecond}, "LaneTTL", "lane_ttl", "1ms"},
		{"timeout", redis.Config{Timeout: -1}, "Timeout", "timeout", "-1ns"},
		{"scan threshold", redis.Config{ScanThreshold: -1}, "ScanThreshold", "scan_threshold", "-1"},
		{"fields per command", redis.Config{FieldsPerCommand: -1}, "FieldsPerCommand", "fields_per_command", "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fe *redis.FieldError
			if err := tt.cfg.Validate(); !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *redis.FieldError", err)
			}
			if fe.Field != tt.field || fe.Key != tt.key || fe.Value != tt.in || fe.Allowed == "" {
				t.Errorf("Validate() = %+v, want field %s, key %s, value %s", fe, tt.field, tt.key, tt.in)
			}
		})
	}
	if err := (redis.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	err := redis.Config{Prefix: "{x}", Shards: -1, TTLMargin: -time.Second}.Validate()
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *redis.FieldError
		if errors.As(e, &fe) {
			keys = append(keys, fe.Key)
		}
	}
	if got := fmt.Sprint(keys); got != "[prefix shards ttl_margin]" {
		t.Errorf("fields = %s, want [prefix shards ttl_margin]", got)
	}
}
