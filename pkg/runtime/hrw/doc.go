// Package hrw decides which node should own which partition, by rendezvous
// (highest random weight) hashing, so that every node of a service reaches
// the same answer from the same membership without talking to the others.
//
// # Why rendezvous hashing
//
// Leases make ownership safe; HRW makes it fair and calm. Each node scores
// every (node, partition) pair with a hash and a partition belongs to the
// node with the highest score. Because a pair's score does not depend on
// which other nodes exist:
//
//   - removing a node moves only the partitions it owned (each goes to its
//     second-highest node), and
//   - adding a node moves only the partitions on which the newcomer now
//     scores highest, about 1/N of them, and every one of them moves to the
//     newcomer.
//
// So a join or a departure causes the least possible lease traffic, and the
// handovers it does cause never chain from one old node to another.
//
// # The cap
//
// Plain HRW spreads partitions about evenly but not exactly: with 300
// partitions on 3 nodes a node gets 100 give or take ~8. Assign accepts a
// cap per node. A node over its cap keeps its highest-scoring partitions and
// passes the rest to their next-highest node with room, which is the unique
// stable assignment for these scores: no partition and node both prefer
// each other over what they got. It is computed by deferred acceptance and
// depends only on the sets of partitions and nodes, never on their order.
// The price of a tight cap is that changes can cascade: a newcomer that
// takes partitions frees room elsewhere, which can pull partitions back
// from their second choices. With no cap (or a loose one) the minimal-move
// properties above hold exactly.
//
// # The hash is a wire format
//
// Nodes of different builds must agree on owners during a rolling deploy,
// so the score is fixed forever: FNV-1a 64 over node, a zero byte and
// partition, finished with the splitmix64 finalizer (FNV alone mixes the
// last bytes poorly, and partition names often differ only there). No
// seed, no per-process randomness. A golden test pins the values; changing
// them is a breaking change to every running fleet.
package hrw
