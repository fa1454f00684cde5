// The SimGrid replay (terngrad/analysis/sim/simulate.h) on cases whose answer is known in closed
// form. Labelled `simgrid`; every test skips when the build has no SimGrid.
#include "terngrad/analysis/sim/simulate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"

namespace tg::sim {
namespace {

#define SKIP_WITHOUT_SIMGRID() \
  if (!simulator_available()) GTEST_SKIP() << simulator_missing()

const std::vector<int64_t> kLayout = {1500, 20, 25000, 50, 400000, 500, 5000, 10};

// One rank per node, `gbit` between nodes, no latency: every route's time is its bytes over the
// links.
Platform flat(double gbit) {
  Platform p;
  p.cluster.name = "flat";
  p.cluster.gpus_per_node = 1;
  p.cluster.intra = {100, 0};
  p.cluster.inter = {gbit, 0};
  return p;
}

// SimGrid's default network model (LV08) gives a flow 0.97 of the link's bandwidth, and its
// acknowledgements (crosstraffic) take 5% of the flow's bytes on the reverse direction: where
// every direction of every link carries data, each byte costs 1.05 / 0.97.
constexpr double kBandwidthFactor = 0.97, kAcks = 1.05;

TEST(Simulate, RingTakesItsBytesOverTheLink) {
  SKIP_WITHOUT_SIMGRID();
  for (int p : {2, 4}) {
    ScheduleOptions o;
    o.ranks = p;
    const Schedule s = build_schedule(kLayout, Method::parse("fp32:ring"), o);
    const Result r = simulate(s, flat(1), Costs{});
    // Every ring step moves one chunk over disjoint links; a rank's sends follow each other, so
    // the busiest rank's bytes over the link, within 2% (uneven chunks, rounding).
    const double want = kAcks * static_cast<double>(s.sent_max) * 8 / (kBandwidthFactor * 1e9);
    EXPECT_NEAR(r.seconds, want, 0.02 * want) << "P = " << p;
    ASSERT_EQ(r.rank_end.size(), static_cast<size_t>(p));
  }
}

// The phase model (each phase one parallel task, SimGrid's ptask_L07) has no TCP factors: a
// ring's phases take exactly their bytes over the link; and it stays near the flow model.
TEST(Simulate, PhaseModelTakesTheBytesOverTheLink) {
  SKIP_WITHOUT_SIMGRID();
  for (int p : {2, 4}) {
    ScheduleOptions o;
    o.ranks = p;
    const Schedule s = build_schedule(kLayout, Method::parse("fp32:ring"), o);
    Platform pf = flat(1);
    pf.model = "phase";
    const double phase = simulate(s, pf, Costs{}).seconds;
    const double want = static_cast<double>(s.sent_max) * 8 / 1e9;
    EXPECT_NEAR(phase, want, 0.01 * want) << "P = " << p;
    const double flow = simulate(s, flat(1), Costs{}).seconds;
    EXPECT_NEAR(phase / flow, kBandwidthFactor / kAcks, 0.02) << "P = " << p;
  }
  Platform bad = flat(1);
  bad.model = "packet";
  EXPECT_THROW(
      simulate(build_schedule(kLayout, Method::parse("fp32"), ScheduleOptions{2}), bad, Costs{}),
      Error);
}

TEST(Simulate, TernGradShardedIsFasterByAboutItsBytes) {
  SKIP_WITHOUT_SIMGRID();
  ScheduleOptions o;
  o.ranks = 4;
  const Schedule fp32 = build_schedule(kLayout, Method::parse("fp32:ring"), o);
  const Schedule tern = build_schedule(kLayout, Method::parse("terngrad:sharded"), o);
  const double t32 = simulate(fp32, flat(1), Costs{}).seconds;
  const double tt = simulate(tern, flat(1), Costs{}).seconds;
  const double bytes_ratio =
      static_cast<double>(fp32.sent_max) / static_cast<double>(tern.sent_max);
  EXPECT_GT(bytes_ratio, 8);
  // Without latency or per-message costs, time follows bytes (within 25%: TernGrad's extra
  // phase of scalers and its shorter messages).
  EXPECT_GT(t32 / tt, 0.75 * bytes_ratio);
  EXPECT_LT(t32 / tt, 1.25 * bytes_ratio);
}

TEST(Simulate, CostsAndLatencyAddUp) {
  SKIP_WITHOUT_SIMGRID();
  ScheduleOptions o;
  o.ranks = 2;
  const Schedule s = build_schedule({1000}, Method::parse("terngrad:allgather"), o);
  // Two phases (scalers, codes), one message each per rank: 2 per-message costs, plus the
  // encode and decode of 1000 elements, plus the bytes.
  Costs c;
  c.per_message_s = 1e-3;
  c.encode_s_per_element = 1e-6;
  c.decode_s_per_element = 2e-6;
  const double base = simulate(s, flat(1), Costs{}).seconds;
  const double with = simulate(s, flat(1), c).seconds;
  EXPECT_NEAR(with - base, 2e-3 + 1e-3 + 2e-3, 1e-6);
}

TEST(Simulate, PhaseWaitsAndSharedCoresAddUp) {
  SKIP_WITHOUT_SIMGRID();
  ScheduleOptions o;
  o.ranks = 4;
  const Schedule s = build_schedule({1000}, Method::parse("terngrad:sharded"), o);
  ASSERT_EQ(s.buckets.size(), 1u);
  size_t phases = 0;
  for (const Chunk& c : s.buckets[0].chunks) phases += c.phases.size();
  EXPECT_EQ(phases, 3u);  // scalers, codes to the owners, sums back
  const double base = simulate(s, flat(1), Costs{}).seconds;
  Costs wait;
  wait.per_phase_s = 1e-3;
  EXPECT_NEAR(simulate(s, flat(1), wait).seconds - base, 3e-3, 1e-6);
  // Four ranks on two cores: every CPU cost twice as long; the phase wait is not CPU.
  Costs cpu;
  cpu.encode_s_per_element = 1e-6;
  cpu.per_phase_s = 1e-3;
  const double own = simulate(s, flat(1), cpu).seconds;
  cpu.shared_cores = 2;
  EXPECT_NEAR(simulate(s, flat(1), cpu).seconds - own, 1e-3, 1e-6);
}

TEST(Simulate, ManyAtOnceGiveTheResultsOfOneAtATime) {
  SKIP_WITHOUT_SIMGRID();
  std::vector<Schedule> schedules;
  for (int p : {2, 3, 4})
    for (const char* m : {"fp32", "fp32:ring", "terngrad"}) {
      ScheduleOptions o;
      o.ranks = p;
      schedules.push_back(build_schedule(kLayout, Method::parse(m), o));
    }
  std::vector<Job> jobs;
  for (const Schedule& s : schedules) jobs.push_back({&s, flat(1), Costs{}, ""});
  const std::vector<Result> all = simulate_all(jobs, 3);
  ASSERT_EQ(all.size(), schedules.size());
  for (size_t i = 0; i < schedules.size(); ++i) {
    EXPECT_EQ(all[i].seconds, simulate(schedules[i], flat(1), Costs{}).seconds) << i;
    EXPECT_EQ(all[i].rank_end.size(), static_cast<size_t>(schedules[i].ranks));
  }
  // A failing job (a platform file that does not exist) fails the batch, naming it.
  Platform missing;
  missing.file = "/nonexistent/platform.xml";
  jobs[1].platform = missing;
  EXPECT_THROW(simulate_all(jobs, 2), Error);
}

TEST(Simulate, BackwardOverlapsTheExchange) {
  SKIP_WITHOUT_SIMGRID();
  ScheduleOptions o;
  o.ranks = 4;
  const Schedule alone = build_schedule(kLayout, Method::parse("fp32:ring"), o);
  const double x = simulate(alone, flat(1), Costs{}).seconds;
  o.forward_s = 0.01;
  o.backward_s = 0.02;
  const Schedule iter = build_schedule(kLayout, Method::parse("fp32:ring"), o);
  const double t = simulate(iter, flat(1), Costs{}).seconds;
  // Not later than compute then the whole exchange; not earlier than the last bucket's ready.
  EXPECT_LE(t, 0.03 + x + 1e-9);
  EXPECT_GE(t, iter.buckets.back().ready_s);
  EXPECT_LT(t, 0.03 + x);  // some of the exchange ran during backward
}

TEST(Simulate, TimelineHasEveryRanksPhases) {
  SKIP_WITHOUT_SIMGRID();
  ScheduleOptions o;
  o.ranks = 3;
  const Schedule s = build_schedule(kLayout, Method::parse("fp32:ring"), o);
  const std::string path = testing::TempDir() + "/timeline_" + std::to_string(getpid()) + ".csv";
  simulate(s, flat(10), Costs{}, path);
  std::ifstream f(path);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_EQ(line, "node,bucket,chunk,phase,start_s,end_s,flows,bytes_sent");
  size_t lines = 0;
  while (std::getline(f, line)) ++lines;
  // One rank per node: every node takes part in each of the ring's 2 (P - 1) steps of every
  // bucket.
  EXPECT_EQ(lines, s.buckets.size() * 3 * 4);
  std::remove(path.c_str());
}

TEST(Simulate, PlatformFileNeedsAHostPerRank) {
  SKIP_WITHOUT_SIMGRID();
  const std::string path = testing::TempDir() + "/platform_" + std::to_string(getpid()) + ".xml";
  {
    std::ofstream f(path);
    f << "<?xml version='1.0'?>\n"
         "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
         "<platform version=\"4.1\">\n"
         "  <zone id=\"z\" routing=\"Full\">\n"
         "    <host id=\"rank-0\" speed=\"1Gf\"/>\n"
         "    <host id=\"rank-1\" speed=\"1Gf\"/>\n"
         "    <link id=\"l\" bandwidth=\"125MBps\" latency=\"0\"/>\n"
         "    <route src=\"rank-0\" dst=\"rank-1\"><link_ctn id=\"l\"/></route>\n"
         "  </zone>\n"
         "</platform>\n";
  }
  Platform pf;
  pf.file = path;
  ScheduleOptions o;
  o.ranks = 2;
  const Schedule two = build_schedule({100000}, Method::parse("fp32:ring"), o);
  const double t = simulate(two, pf, Costs{}).seconds;
  // One shared 1 Gbit/s link for both directions: each rank's 400 KB through it at once.
  EXPECT_NEAR(t, kAcks * 2 * 400000 * 8 / (kBandwidthFactor * 1e9), 0.02 * t);
  o.ranks = 3;
  const Schedule three = build_schedule({100000}, Method::parse("fp32:ring"), o);
  try {
    simulate(three, pf, Costs{});
    ADD_FAILURE() << "three ranks on a two-host platform";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no host named rank-2"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// The validated points of bench/README ("The simulator against measurement"): each recorded
// pair within 15% of its measurement is simulated again from its recorded constants and must
// give the recorded figure (the simulation is deterministic; 0.1% for the platform's rounding).
TEST(Simulate, ReproducesTheRecordedValidation) {
  SKIP_WITHOUT_SIMGRID();
  std::ifstream f(std::string(TG_SOURCE_DIR) + "/bench/results/2026-11-29-sim-check.jsonl");
  ASSERT_TRUE(f.good());
  const std::map<std::string, std::string> methods = {
      {"fp32", "fp32"},
      {"fp32-ring", "fp32:ring"},
      {"ps", "terngrad:ps"},
      {"allgather", "terngrad:allgather"},
      {"packed-allreduce", "terngrad:packed-allreduce"},
      {"sharded", "terngrad:sharded"},
      {"auto", "terngrad"}};
  const auto lenet = make_net("lenet", NetOptions{}, Device::cpu());
  std::vector<int64_t> numel;
  for (const auto& e : lenet->arena().entries()) numel.push_back(e.numel);
  int checked = 0;
  for (std::string line; std::getline(f, line);) {
    const json::Value r = json::parse(line);
    if (std::abs(r["error"].as_number()) > 0.15) continue;
    ScheduleOptions o;
    o.ranks = static_cast<int>(r["procs"].as_number());
    o.bucket_bytes = o.first_bucket_bytes = int64_t{1} << 62;  // one call, as bench_comm
    const Schedule s = build_schedule(numel, Method::parse(methods.at(r["case"].as_string())), o);
    EXPECT_EQ(static_cast<double>(s.sent_max), r["sent_max_measured"].as_number());
    Platform pf;
    pf.cluster.name = "netns";
    pf.cluster.gpus_per_node = 1;
    pf.cluster.intra = pf.cluster.inter = {r["link_gbit"].as_number(), 3e-6};
    Costs c;
    c.per_phase_s = 1e-3 * r["per_phase_ms"].as_number();
    c.encode_s_per_element = 1e-9 * r["encode_ns"].as_number();
    c.decode_s_per_element = 1e-9 * r["decode_ns"].as_number();
    c.shared_cores = 2;
    const double ms = 1e3 * simulate(s, pf, c).seconds;
    EXPECT_NEAR(ms, r["simulated_ms"].as_number(), 1e-3 * ms) << line;
    EXPECT_NEAR(ms, r["measured_ms"].as_number(), 0.15 * r["measured_ms"].as_number()) << line;
    ++checked;
  }
  EXPECT_GE(checked, 11);
}

}  // namespace
}  // namespace tg::sim
