package hrw_test

import (
	"fmt"

	"github.com/protctl/protctl/pkg/runtime/hrw"
)

func ExampleAssign() {
	partitions := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}
	nodes := []string{"node-a", "node-b", "node-c"}

	// Every node computes the same map from the same membership.
	owners := hrw.Assign(partitions, nodes, hrw.FairShare(len(partitions), len(nodes)))
	load := map[string]int{}
	for _, node := range owners {
		load[node]++
	}
	fmt.Println(load["node-a"], load["node-b"], load["node-c"])
	// Output: 4 4 4
}

func ExampleRank() {
	// Rank is the order in which partition 7 falls back as owners leave.
	fmt.Println(hrw.Rank("7", []string{"node-a", "node-b", "node-c"})[0] == hrw.Owner("7", []string{"node-c", "node-a", "node-b"}))
	// Output: true
}
