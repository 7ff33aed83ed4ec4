package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy/postgres"
)

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name           string
		cfg            postgres.Config
		field, key, in string
	}{
		{"schema", postgres.Config{Schema: "A"}, "Schema", "schema", "A"},
		{"table", postgres.Config{Table: "x-y"}, "Table", "table", "x-y"},
		{"lane table", postgres.Config{Table: "t", LaneTable: "t_check"}, "LaneTable", "lane_table", "t_check"},
		{"lane table as the buckets table", postgres.Config{Table: "t", LaneTable: "t_buckets"}, "LaneTable", "lane_table", "t_buckets"},
		{"lane table as the logs' entries table", postgres.Config{Table: "t", LaneTable: "t_logentries"}, "LaneTable", "lane_table", "t_logentries"},
		{"lane table as the anchored windows table", postgres.Config{Table: "t", LaneTable: "t_anchored"}, "LaneTable", "lane_table", "t_anchored"},
		{"purge batch", postgres.Config{PurgeBatch: -1}, "PurgeBatch", "purge_batch", "-1"},
		{"lane ttl", postgres.Config{LaneTTL: time.Microsecond}, "LaneTTL", "lane_ttl", "1µs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fe *postgres.FieldError
			if err := tt.cfg.Validate(); !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *postgres.FieldError", err)
			}
			if fe.Field != tt.field || fe.Key != tt.key || fe.Value != tt.in || fe.Allowed == "" {
				t.Errorf("Validate() = %+v, want field %s, key %s, value %s", fe, tt.field, tt.key, tt.in)
			}
		})
	}
	if err := (postgres.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	err := postgres.Config{Schema: "a-b", PurgeBatch: -1, LaneTTL: -time.Second}.Validate()
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *postgres.FieldError
		if errors.As(e, &fe) {
			keys = append(keys, fe.Key)
		}
	}
	if got := fmt.Sprint(keys); got != "[schema purge_batch lane_ttl]" {
		t.Errorf("fields = %s, want [schema purge_batch lane_ttl]", got)
	}
}
