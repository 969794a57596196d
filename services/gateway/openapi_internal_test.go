package gateway

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes fails when docs/openapi.json and the served
// routes disagree.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var documented, served []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	for _, r := range routeTable {
		served = append(served, r.method+" "+r.path)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("openapi.json documents %v, the gateway serves %v", documented, served)
	}
}
