package main

import (
	"slices"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantErr     bool
		wantLayout  broker.Layout
		wantCluster []string
	}{
		{name: "single server, protean by default", args: []string{"-redis", "127.0.0.1:1"}, wantLayout: broker.ProteanLayout},
		{name: "cluster layout on one server", args: []string{"-layout", "cluster"}, wantLayout: broker.ClusterLayout},
		{name: "cluster", args: []string{"-cluster", "a:1,b:2,c:3", "-layout", "cluster"}, wantLayout: broker.ClusterLayout, wantCluster: []string{"a:1", "b:2", "c:3"}},
		{name: "cluster with the protean layout", args: []string{"-cluster", "a:1"}, wantErr: true},
		{name: "unknown layout", args: []string{"-layout", "sharded"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if cfg.layout != tt.wantLayout {
				t.Errorf("layout = %s, want %s", cfg.layout, tt.wantLayout)
			}
			if !slices.Equal(cfg.cluster, tt.wantCluster) {
				t.Errorf("cluster = %q, want %q", cfg.cluster, tt.wantCluster)
			}
		})
	}
}
