// Which node (host) each rank of a group runs on: what a hierarchical exchange keeps inside a
// node and the cost model counts as crossing the slower links between nodes
// (terngrad/exchange/plan.h). The process group learns it at the rendezvous (comm/process_group.h:
// from the config's comm.ranks_per_node, else Slurm's node index, else the host name); tests and
// benchmarks make one by hand.
//
// Nodes are numbered 0, 1, ... in the order of their lowest rank, so every rank that sees the
// same keys builds the same layout. A node's ranks need not be contiguous.
#pragma once

#include <string>
#include <vector>

namespace tg::comm {

struct NodeLayout {
  // node_of[r]: the node of rank r. Empty: no layout known (every rank treated as a node of its
  // own by the routes that ask for nodes; one node by the cost model, see plan.h).
  std::vector<int> node_of;

  // Every rank on one node, and every rank alone.
  static NodeLayout single(int ranks);
  static NodeLayout each_alone(int ranks);
  // Rank r on node r / per_node (the last node shorter when per_node does not divide ranks).
  static NodeLayout blocks(int ranks, int per_node);
  // From one key per rank (a host name, Slurm's node id): equal keys, one node.
  static NodeLayout from_keys(const std::vector<std::string>& keys);

  bool known() const { return !node_of.empty(); }
  int ranks() const { return static_cast<int>(node_of.size()); }
  int nodes() const;  // 0 when unknown
  // The ranks of node n, ascending.
  std::vector<int> members(int n) const;
  // "2 nodes: 4 + 4 ranks", "1 node of 8 ranks", "unknown".
  std::string str() const;
  // Throws naming the problem unless the layout is unknown or covers `ranks` ranks with nodes
  // numbered 0.. in order of their lowest rank.
  void check(int ranks) const;

  bool operator==(const NodeLayout&) const = default;
};

}  // namespace tg::comm
