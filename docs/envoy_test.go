package docs_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // the cluster's typed_extension_protocol_options
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// docs/envoy.md's Envoy configuration (static_resources, with parts left
// out as "# ...") holds a cluster and a rate limit filter that Envoy's own
// schema takes: each is decoded with the API's protobuf types (unknown
// fields and wrong types refused) and passes their validation rules. The
// filter asks for the domain of the example rls file, on the cluster that
// points at the node's rls port.
func TestDocsEnvoyConfiguration(t *testing.T) {
	page, err := os.ReadFile("envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	block := envoyBlock(t, string(page))
	var doc struct {
		StaticResources struct {
			Clusters  []map[string]any `yaml:"clusters"`
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							HTTPFilters []map[string]any `yaml:"http_filters"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("the page's Envoy configuration: %v", err)
	}
	sr := doc.StaticResources
	if len(sr.Clusters) != 1 || len(sr.Listeners) != 1 {
		t.Fatalf("want one cluster and one listener, got %d and %d", len(sr.Clusters), len(sr.Listeners))
	}

	var cluster clusterv3.Cluster
	decodeEnvoy(t, "clusters[0]", sr.Clusters[0], &cluster)
	if err := cluster.ValidateAll(); err != nil {
		t.Errorf("cluster: %v", err)
	}
	addr := cluster.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetPortValue() != 8081 {
		t.Errorf("the cluster points at port %d, want the node's rls port 8081", addr.GetPortValue())
	}

	var filter *ratelimitv3.RateLimit
	for _, f := range sr.Listeners[0].FilterChains[0].Filters[0].TypedConfig.HTTPFilters {
		if f["name"] != "envoy.filters.http.ratelimit" {
			continue
		}
		var typed anypb.Any
		decodeEnvoy(t, "the rate limit filter's typed_config", f["typed_config"], &typed)
		filter = &ratelimitv3.RateLimit{}
		if err := typed.UnmarshalTo(filter); err != nil {
			t.Fatalf("the rate limit filter's typed_config: %v", err)
		}
	}
	if filter == nil {
		t.Fatal("no envoy.filters.http.ratelimit filter")
	}
	if err := filter.ValidateAll(); err != nil {
		t.Errorf("rate limit filter: %v", err)
	}
	if got := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster.GetName() {
		t.Errorf("the filter's rate limit service is cluster %q, want %q", got, cluster.GetName())
	}
	rls, err := os.ReadFile("../examples/rls/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := "domain: " + filter.GetDomain(); !strings.Contains(string(rls), want) {
		t.Errorf("the filter asks for domain %q, which examples/rls/shop.yaml does not hold", filter.GetDomain())
	}
}

// envoyBlock returns the page's YAML block that holds static_resources.
func envoyBlock(t *testing.T, page string) string {
	t.Helper()
	for _, part := range strings.Split(page, "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.HasPrefix(block, "static_resources:") {
			return block
		}
	}
	t.Fatal("no yaml block with static_resources")
	return ""
}

// decodeEnvoy decodes v, a part of the YAML, into m as Envoy reads its
// configuration: protobuf JSON, no unknown field.
func decodeEnvoy(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		t.Fatalf("%s is not Envoy's %T: %v", what, m, err)
	}
}
