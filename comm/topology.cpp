#include "comm/topology.h"

#include <algorithm>
#include <map>

#include "nn/core/error.h"

namespace tg::comm {

NodeLayout NodeLayout::single(int ranks) {
  TG_CHECK(ranks >= 1, "node layout: ", ranks, " ranks (expected >= 1)");
  return {std::vector<int>(static_cast<size_t>(ranks), 0)};
}

NodeLayout NodeLayout::each_alone(int ranks) {
  TG_CHECK(ranks >= 1, "node layout: ", ranks, " ranks (expected >= 1)");
  NodeLayout l;
  for (int r = 0; r < ranks; ++r) l.node_of.push_back(r);
  return l;
}

NodeLayout NodeLayout::blocks(int ranks, int per_node) {
  TG_CHECK(ranks >= 1 && per_node >= 1, "node layout: ", ranks, " ranks, ", per_node,
           " per node (expected both >= 1)");
  NodeLayout l;
  for (int r = 0; r < ranks; ++r) l.node_of.push_back(r / per_node);
  return l;
}

NodeLayout NodeLayout::from_keys(const std::vector<std::string>& keys) {
  std::map<std::string, int> seen;
  NodeLayout l;
  for (const std::string& k : keys) {
    const auto [it, fresh] = seen.try_emplace(k, static_cast<int>(seen.size()));
    l.node_of.push_back(it->second);
  }
  return l;
}

int NodeLayout::nodes() const {
  return node_of.empty() ? 0 : *std::max_element(node_of.begin(), node_of.end()) + 1;
}

std::vector<int> NodeLayout::members(int n) const {
  std::vector<int> out;
  for (int r = 0; r < ranks(); ++r)
    if (node_of[static_cast<size_t>(r)] == n) out.push_back(r);
  return out;
}

std::string NodeLayout::str() const {
  if (!known()) return "unknown";
  const int m = nodes();
  if (m == 1) return detail::concat("1 node of ", ranks(), ranks() == 1 ? " rank" : " ranks");
  std::string sizes;
  bool even = true;
  const size_t first = members(0).size();
  for (int n = 0; n < m; ++n) {
    const size_t g = members(n).size();
    even = even && g == first;
    sizes += (n ? " + " : "") + std::to_string(g);
  }
  if (even) return detail::concat(m, " nodes of ", first, first == 1 ? " rank" : " ranks");
  return detail::concat(m, " nodes: ", sizes, " ranks");
}

void NodeLayout::check(int ranks) const {
  if (!known()) return;
  TG_CHECK(this->ranks() == ranks, "node layout of ", this->ranks(), " ranks for a group of ",
           ranks);
  int next = 0;
  for (int r = 0; r < ranks; ++r) {
    const int n = node_of[static_cast<size_t>(r)];
    TG_CHECK(n >= 0 && n <= next, "node layout: rank ", r, " on node ", n,
             " (nodes are numbered 0, 1, ... in order of their lowest rank)");
    if (n == next) ++next;
  }
}

}  // namespace tg::comm
