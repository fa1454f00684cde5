// simulate() on SimGrid (see simulate.h). Built only when CMake finds SimGrid (TG_HAVE_SIMGRID).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <simgrid/s4u.hpp>

#include "nn/core/error.h"
#include "terngrad/sim/simulate.h"

namespace sg4 = simgrid::s4u;

namespace tg::sim {

bool simulator_available() {
  return true;
}
std::string simulator_missing() {
  return "";
}

namespace {

using Dir = sg4::LinkInRoute::Direction;

// What rank r does in one phase: its sends (peer, bytes) and the peers it receives from.
struct RankPhase {
  std::vector<std::pair<int, int64_t>> sends;
  std::vector<int> recvs;
};

// Per bucket, chunk, phase: every rank's part (an empty part: nothing to do in that phase).
struct Index {
  // steps[b][c][k][r]
  std::vector<std::vector<std::vector<std::vector<RankPhase>>>> steps;
  explicit Index(const Schedule& s) {
    steps.resize(s.buckets.size());
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      const Bucket& bk = s.buckets[b];
      steps[b].resize(bk.chunks.size());
      for (size_t c = 0; c < bk.chunks.size(); ++c) {
        auto& ck = steps[b][c];
        ck.resize(bk.chunks[c].phases.size());
        for (size_t k = 0; k < ck.size(); ++k) {
          ck[k].resize(static_cast<size_t>(s.ranks));
          for (const tern::Message& m : bk.chunks[c].phases[k]) {
            ck[k][static_cast<size_t>(m.src)].sends.push_back({m.dst, m.bytes});
            ck[k][static_cast<size_t>(m.dst)].recvs.push_back(m.src);
          }
        }
      }
    }
  }
};

struct Line {
  int rank;
  size_t bucket, chunk, phase;
  double start, end;
  size_t sends;
  int64_t bytes;
};

// The cluster: node zones of G hosts (each on its intra link to the node's router), under a star
// whose arms are the nodes' inter links, through one shared core link when oversubscribed.
std::vector<sg4::Host*> build_cluster(const Platform& pf, int ranks) {
  const perf::Cluster& c = pf.cluster;
  perf::validate(c);
  TG_CHECK(pf.oversubscription >= 1, "platform: oversubscription ", pf.oversubscription,
           " (expected >= 1)");
  const int g = c.gpus_per_node;
  const int nodes = (ranks + g - 1) / g;
  auto* root = sg4::create_star_zone("cluster");
  const sg4::Link* core = nullptr;
  if (pf.oversubscription > 1 && nodes > 1)
    core = root->create_link("core", nodes * c.inter.gbit_per_s * 1e9 / 8 / pf.oversubscription)
               ->set_latency(0)
               ->seal();
  std::vector<sg4::Host*> hosts;
  for (int n = 0; n < nodes; ++n) {
    auto* zone = sg4::create_star_zone("node-" + std::to_string(n));
    zone->set_parent(root);
    auto* gw = zone->create_router("node-" + std::to_string(n) + "-gw");
    zone->add_route(gw, nullptr, nullptr, nullptr, {}, true);
    for (int r = n * g; r < std::min(ranks, (n + 1) * g); ++r) {
      sg4::Host* h = zone->create_host("rank-" + std::to_string(r), 1e9);
      hosts.push_back(h);
      sg4::Link* l =
          c.full_duplex
              ? static_cast<sg4::Link*>(zone->create_split_duplex_link(
                    "intra-" + std::to_string(r), c.intra.gbit_per_s * 1e9 / 8))
              : zone->create_link("intra-" + std::to_string(r), c.intra.gbit_per_s * 1e9 / 8);
      l->set_latency(c.intra.latency_s)->seal();
      zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
                      {sg4::LinkInRoute(l, c.full_duplex ? Dir::UP : Dir::NONE)}, true);
    }
    zone->seal();
    sg4::Link* up = c.full_duplex ? static_cast<sg4::Link*>(root->create_split_duplex_link(
                                        "inter-" + std::to_string(n), c.inter.gbit_per_s * 1e9 / 8))
                                  : root->create_link("inter-" + std::to_string(n),
                                                      c.inter.gbit_per_s * 1e9 / 8);
    up->set_latency(c.inter.latency_s)->seal();
    std::vector<sg4::LinkInRoute> route = {
        sg4::LinkInRoute(up, c.full_duplex ? Dir::UP : Dir::NONE)};
    if (core) route.emplace_back(core);
    root->add_route(zone->get_netpoint(), nullptr, gw, nullptr, route, true);
  }
  root->seal();
  return hosts;
}

Result run_engine(const Schedule& s, const Platform& pf, const Costs& costs,
                  const std::string& timeline_csv) {
  int argc = 2;
  char arg0[] = "terngrad-sim";
  char arg1[] = "--log=root.thres:critical";
  char* argv[] = {arg0, arg1, nullptr};
  sg4::Engine e(&argc, argv);
  std::vector<sg4::Host*> hosts;
  if (!pf.file.empty()) {
    e.load_platform(pf.file);
    for (int r = 0; r < s.ranks; ++r) {
      sg4::Host* h = e.host_by_name_or_null("rank-" + std::to_string(r));
      TG_CHECK(h != nullptr, "platform file ", pf.file, ": no host named rank-", r, " (", s.ranks,
               " ranks need hosts rank-0 .. rank-", s.ranks - 1, ")");
      hosts.push_back(h);
    }
  } else {
    hosts = build_cluster(pf, s.ranks);
  }
  const Index idx(s);
  const bool tern = s.method.gradients == Gradients::terngrad;
  const double stretch = costs.shared_cores > 0
                             ? std::max(1.0, static_cast<double>(s.ranks) / costs.shared_cores)
                             : 1.0;
  std::vector<double> end(static_cast<size_t>(s.ranks), 0);
  std::vector<std::vector<Line>> lines(static_cast<size_t>(s.ranks));
  const bool keep = !timeline_csv.empty();
  // Mailboxes by pair, made once (by name: "src>dst").
  auto box = [](int a, int b) {
    return sg4::Mailbox::by_name(std::to_string(a) + ">" + std::to_string(b));
  };
  static char token = 0;
  for (int r = 0; r < s.ranks; ++r) {
    sg4::Actor::create("rank-" + std::to_string(r), hosts[static_cast<size_t>(r)], [&, r] {
      for (size_t b = 0; b < s.buckets.size(); ++b) {
        const Bucket& bk = s.buckets[b];
        if (bk.ready_s > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(bk.ready_s);
        if (tern && costs.encode_s_per_element > 0)
          sg4::this_actor::sleep_for(stretch * costs.encode_s_per_element *
                                     static_cast<double>(bk.elements));
        for (size_t c = 0; c < idx.steps[b].size(); ++c)
          for (size_t k = 0; k < idx.steps[b][c].size(); ++k) {
            const RankPhase& mine = idx.steps[b][c][k][static_cast<size_t>(r)];
            if (mine.sends.empty() && mine.recvs.empty()) continue;
            const double t0 = sg4::Engine::get_clock();
            if (costs.per_phase_s > 0) sg4::this_actor::sleep_for(costs.per_phase_s);
            if (costs.per_message_s > 0 && !mine.sends.empty())
              sg4::this_actor::sleep_for(stretch * costs.per_message_s *
                                         static_cast<double>(mine.sends.size()));
            std::vector<sg4::CommPtr> comms;
            std::vector<char*> got(mine.recvs.size());
            for (size_t i = 0; i < mine.recvs.size(); ++i)
              comms.push_back(box(mine.recvs[i], r)->get_async<char>(&got[i]));
            int64_t bytes = 0;
            for (const auto& [peer, n] : mine.sends) {
              comms.push_back(box(r, peer)->put_async(&token, static_cast<uint64_t>(n)));
              bytes += n;
            }
            sg4::Comm::wait_all(comms);
            if (keep)
              lines[static_cast<size_t>(r)].push_back(
                  {r, b, c, k, t0, sg4::Engine::get_clock(), mine.sends.size(), bytes});
          }
        if (tern && costs.decode_s_per_element > 0)
          sg4::this_actor::sleep_for(stretch * costs.decode_s_per_element *
                                     static_cast<double>(bk.elements));
      }
      end[static_cast<size_t>(r)] = sg4::Engine::get_clock();
    });
  }
  e.run();
  if (keep) {
    std::ofstream f(timeline_csv);
    TG_CHECK(f.good(), "cannot write the timeline to ", timeline_csv, ": ", std::strerror(errno));
    f << "rank,bucket,chunk,phase,start_s,end_s,sends,bytes_sent\n";
    for (const auto& per_rank : lines)
      for (const Line& l : per_rank)
        f << l.rank << ',' << l.bucket << ',' << l.chunk << ',' << l.phase << ',' << l.start << ','
          << l.end << ',' << l.sends << ',' << l.bytes << '\n';
    TG_CHECK(f.good(), "cannot write the timeline to ", timeline_csv);
  }
  Result res;
  res.rank_end = end;
  for (double t : end) res.seconds = std::max(res.seconds, t);
  res.messages = s.messages;
  return res;
}

bool write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A simulation running in a child process: its pid and the read end of its result pipe.
struct Child {
  pid_t pid = -1;
  int fd = -1;
};

Child start(const Job& job) {
  TG_CHECK(job.schedule != nullptr, "simulate: no schedule");
  const Costs& c = job.costs;
  TG_CHECK(c.per_message_s >= 0 && c.encode_s_per_element >= 0 && c.decode_s_per_element >= 0 &&
               c.shared_cores >= 0 && c.per_phase_s >= 0,
           "simulate: negative cost");
  int fds[2];
  TG_CHECK(::pipe(fds) == 0, "simulate: pipe: ", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    TG_THROW("simulate: fork: ", std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    char status = 0;
    try {
      const Result r = run_engine(*job.schedule, job.platform, job.costs, job.timeline_csv);
      out.assign(reinterpret_cast<const char*>(r.rank_end.data()),
                 r.rank_end.size() * sizeof(double));
    } catch (const std::exception& e) {
      status = 1;
      out = e.what();
    }
    const bool ok = write_all(fds[1], &status, 1) && write_all(fds[1], out.data(), out.size());
    ::_exit(ok ? 0 : 2);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

Result finish(const Child& child, const Schedule& schedule) {
  std::string got;
  char buf[1 << 16];
  for (;;) {
    const ssize_t k = ::read(child.fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got.append(buf, static_cast<size_t>(k));
  }
  ::close(child.fd);
  int wstatus = 0;
  while (::waitpid(child.pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  TG_CHECK(!got.empty() && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
           "simulate: the simulation process ended without a result (",
           WIFSIGNALED(wstatus) ? "killed by signal " + std::to_string(WTERMSIG(wstatus))
                                : "exit status " + std::to_string(WEXITSTATUS(wstatus)),
           ")");
  if (got[0] != 0) TG_THROW(got.substr(1));
  const size_t n = (got.size() - 1) / sizeof(double);
  TG_CHECK(n == static_cast<size_t>(schedule.ranks), "simulate: ", n, " rank results for ",
           schedule.ranks, " ranks");
  Result r;
  r.rank_end.resize(n);
  std::memcpy(r.rank_end.data(), got.data() + 1, n * sizeof(double));
  for (double t : r.rank_end) r.seconds = std::max(r.seconds, t);
  r.messages = schedule.messages;
  return r;
}

}  // namespace

std::vector<Result> simulate_all(const std::vector<Job>& jobs, int parallel) {
  TG_CHECK(parallel >= 1, "simulate_all: ", parallel, " at once (expected >= 1)");
  std::vector<Result> out(jobs.size());
  std::vector<std::pair<size_t, Child>> running;
  std::string error;
  size_t next = 0;
  // Every started child is waited for, even after one failed; the first error is thrown after.
  while (next < jobs.size() || !running.empty()) {
    while (error.empty() && next < jobs.size() && running.size() < static_cast<size_t>(parallel)) {
      try {
        running.push_back({next, start(jobs[next])});
      } catch (const std::exception& e) {
        error = e.what();
      }
      ++next;
    }
    if (running.empty()) break;
    const auto [i, child] = running.front();
    running.erase(running.begin());
    try {
      out[i] = finish(child, *jobs[i].schedule);
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) TG_THROW(error);
  return out;
}

Result simulate(const Schedule& schedule, const Platform& platform, const Costs& costs,
                const std::string& timeline_csv) {
  return simulate_all({Job{&schedule, platform, costs, timeline_csv}}, 1)[0];
}

}  // namespace tg::sim
