// Node layouts (comm/topology.h) and how the process group learns one (comm/process_group.h):
// from comm.ranks_per_node, Slurm's node index or host names, checked against Open MPI's count of
// ranks per node.
#include "comm/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nn/core/error.h"

namespace tg::comm {
namespace {

TEST(NodeLayout, MadeByHandAndNamed) {
  EXPECT_EQ(NodeLayout::blocks(5, 2).node_of, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(NodeLayout::single(3).node_of, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(NodeLayout::each_alone(3).node_of, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(NodeLayout::blocks(8, 4).str(), "2 nodes of 4 ranks");
  EXPECT_EQ(NodeLayout::blocks(5, 2).str(), "3 nodes: 2 + 2 + 1 ranks");
  EXPECT_EQ(NodeLayout::single(3).str(), "1 node of 3 ranks");
  EXPECT_EQ(NodeLayout{}.str(), "unknown");
  EXPECT_EQ(NodeLayout{}.nodes(), 0);
  EXPECT_EQ(NodeLayout::blocks(5, 2).members(1), (std::vector<int>{2, 3}));
  EXPECT_THROW(NodeLayout::blocks(0, 2), Error);
  EXPECT_THROW(NodeLayout::blocks(4, 0), Error);
}

TEST(NodeLayout, NodesNumberedByTheirLowestRank) {
  const NodeLayout l = NodeLayout::from_keys({"host:b", "host:a", "host:b", "host:c", "host:a"});
  EXPECT_EQ(l.node_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_NO_THROW(l.check(5));
  EXPECT_THROW(l.check(4), Error);                     // another group size
  EXPECT_THROW((NodeLayout{{1, 0}}.check(2)), Error);  // node 1 before node 0
  EXPECT_THROW((NodeLayout{{0, -1}}.check(2)), Error);
  EXPECT_NO_THROW(NodeLayout{}.check(7));  // unknown: anything goes
}

TEST(NodeLayout, LearnedFromSlurmHostNamesOrTheConfig) {
  EXPECT_EQ(node_key({}, "gpu7"), "host:gpu7");
  EXPECT_EQ(node_key({{"SLURM_NODEID", "3"}, {"SLURM_JOB_ID", "812"}}, "gpu7"), "slurm-node:812/3");
  EXPECT_EQ(node_key({{"SLURM_NODEID", "3"}}, "gpu7"), "host:gpu7");  // not started by Slurm
  std::string from;
  const std::vector<std::string> keys = {"host:a", "host:a", "host:b", "host:b"};
  EXPECT_EQ(node_layout(keys, 0, 0, 0, &from).node_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(from, "host names");
  EXPECT_EQ(node_layout(keys, 1, 0, 0, &from).node_of, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(from, "comm.ranks_per_node = 1");
  const std::vector<std::string> slurm = {"slurm-node:9/0", "slurm-node:9/1"};
  EXPECT_EQ(node_layout(slurm, 0, 1, 0, &from).nodes(), 2);
  EXPECT_EQ(from, "Slurm's node index");
  // Open MPI counts 2 ranks on this rank's node: the host names agree; 4 would not.
  EXPECT_NO_THROW(node_layout(keys, 0, 2, 2, &from));
  try {
    node_layout(keys, 0, 2, 4, &from);
    ADD_FAILURE() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm.ranks_per_node"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tg::comm
