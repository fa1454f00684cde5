#include "comm/process_group.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "comm/secret.h"
#include "nn/core/checked.h"
#include "nn/core/cpu_env.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/json.h"

namespace tg::comm {

namespace {

// "0,1,5": a CPU list as the start-up record carries it.
std::string cpu_list_str(const std::vector<int>& cpus) {
  std::string s;
  for (int c : cpus) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

bool cpus_overlap(const std::vector<int>& mine, const std::vector<int>& theirs) {
  for (int c : theirs)
    if (std::find(mine.begin(), mine.end(), c) != mine.end()) return true;
  return false;
}

// "0,1,5" -> {0, 1, 5}; throws naming `what` on anything but CPU numbers 0..2^20 and commas.
std::vector<int> parse_cpu_list(std::string_view text, const std::string& what) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(at, comma - at);
    int c = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), c);
    TG_CHECK(ec == std::errc() && end == item.data() + item.size() && c >= 0 && c <= (1 << 20),
             what, ": '", item, "' is not a CPU number (expected a list like 0,1,2)");
    cpus.push_back(c);
    at = comma + 1;
  }
  return cpus;
}

using std::chrono::milliseconds;

std::vector<char> bytes_of(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

// Waits up to `timeout` for every key; returns the indices of the keys still missing after it.
std::vector<int> missing_after_wait(Store& store, const std::vector<std::string>& keys,
                                    milliseconds timeout) {
  try {
    store.wait(keys, timeout);
    return {};
  } catch (const Error&) {
  }
  std::vector<int> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    try {
      store.wait({keys[i]}, milliseconds(1));
    } catch (const Error&) {
      missing.push_back(static_cast<int>(i));
    }
  }
  return missing;
}

}  // namespace

Backend resolve_backend(Backend backend, const Device& device) {
  if (backend == Backend::automatic) return device.is_cuda() ? Backend::nccl : Backend::gloo;
  TG_CHECK(backend != Backend::nccl || device.is_cuda(), "comm.backend = \"nccl\" needs CUDA ",
           "training (device = \"cuda\"), but the device is ", device.str(),
           "; use comm.backend = \"gloo\" (or \"auto\") for CPU training");
  return backend;
}

Device rank_device(const std::string& device, int rank, int world_size) {
  const Device d = parse_device(device);
  if (device != "cuda" || world_size <= 1) return d;
  const int count = cuda::device_count();
  if (count <= 0) return d;  // check_device_usable explains
  return Device::cuda(rank % count);
}

RendezvousHello parse_rendezvous_hello(std::string_view bytes, int rank) {
  const std::string what = "rendezvous: rank " + std::to_string(rank) + "'s start-up record";
  TG_CHECK(bytes.substr(0, kSignedMagicBytes) != std::string_view(kSignedMagic, kSignedMagicBytes),
           what,
           " is signed with a job secret and this rank has none (give every rank the same "
           "comm.secret_file or TG_SECRET_FILE)");
  TG_CHECK(bytes.size() <= kMaxHelloBytes, what, " has ", bytes.size(), " bytes (at most ",
           kMaxHelloBytes, "; a stale key or another program's?)");
  try {
    const json::Value v = json::parse(bytes);
    RendezvousHello h;
    h.world_size = checked_integer<int>(v["world_size"].as_number(), "world_size");
    h.backend = v["backend"].as_string();
    h.start_step = checked_integer<int64_t>(v["start_step"].as_number(), "start_step");
    h.gpu = v["gpu"].as_string();
    h.config = v["config"].as_string();
    if (v.has("host")) {
      h.host = v["host"].as_string();
      h.cpus = parse_cpu_list(v["cpus"].as_string(), "cpus");
    }
    if (v.has("node")) h.node = v["node"].as_string();
    return h;
  } catch (const Error& e) {
    TG_THROW(what, " is malformed: ", e.what(),
             " (a different terngrad build, or a stale key from another job?)");
  }
}

ProcessGroup::ProcessGroup(const RankEnv& env, const std::string& job_id,
                           const GroupOptions& options, const Device& device,
                           const RunIdentity& run)
    : env_(env), prefix_("tg/" + job_id), timeout_(options.timeout_ms()) {
  TG_CHECK(env.world_size >= 1, "process group: needs a world of at least 1 rank, got ",
           env.world_size);
  TG_CHECK(!env.rendezvous.empty(), "process group: rank ", env.rank, " of ", env.world_size,
           " has no rendezvous URL (--rendezvous file://DIR or redis://HOST:PORT)");
  TG_CHECK(!job_id.empty() && job_id.find('/') == std::string::npos,
           "--job-id: must be a non-empty name without '/', got '", job_id, "'");
  // The backend asked for; `auto` on CUDA is settled after the exchange below.
  Backend backend = resolve_backend(options.backend, device);
  const bool auto_cuda = options.backend == Backend::automatic && device.is_cuda();
  const std::string backend_name(enum_name(kBackends, backend));
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string gpu = device.is_cuda() ? std::string(host) + "/" + device.str() : "";
  store_ = comm::open_store(env.rendezvous, timeout_);
  const EnvMap env_vars = current_environment();
  std::optional<Mac256> mac_key;
  if (const std::optional<JobSecret> secret =
          find_job_secret(options.secret_file, env_get(env_vars, "TG_SECRET_FILE"))) {
    mac_key = job_mac_key(secret->bytes, prefix_);
    store_ = signed_store(std::move(store_), *mac_key);
    secret_source_ = secret->source;
  }

  // ---- start-up record: world size, backend, config, start iteration --------------------------
  const std::string& fingerprint = run.fingerprint;
  const int64_t start_step = run.start_step;
  json::Object hello;
  hello.add("world_size", env.world_size).add("backend", backend_name);
  hello.add("start_step", start_step);
  hello.add("gpu", gpu);
  hello.add("config", fingerprint);
  // Where this rank runs: the thread policy counts the ranks sharing this rank's CPUs.
  const std::vector<int> my_cpus = affinity_cpu_list();
  hello.add("host", std::string(host)).add("cpus", cpu_list_str(my_cpus));
  const std::string my_node = node_key(env_vars, host);
  hello.add("node", my_node);
  try {
    store_->set(key("hello", env.rank), bytes_of(hello.str()));
  } catch (const Error& e) {
    TG_THROW("rendezvous: ", e.what(),
             ". A rendezvous store holds the keys of one job: give this run a fresh directory, or "
             "another --job-id (all ranks the same)");
  }
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(key("hello", r));
  const std::vector<int> missing = missing_after_wait(*store_, keys, timeout_);
  TG_CHECK(missing.empty(), "rendezvous at ", redact_store_url(env.rendezvous), " (job '", job_id,
           "'): rank(s) ", join_ranks(missing), " of ", env.world_size, " did not arrive within ",
           options.timeout, " s (not started, failed before joining, given another rendezvous ",
           "or --job-id, or another world size?)");
  bool shared_gpu = false;
  local_sharing_ = 1;
  std::vector<std::string> node_keys(static_cast<size_t>(env.world_size), my_node);
  for (int r = 0; r < env.world_size; ++r) {
    if (r == env.rank) continue;
    const std::vector<char> raw = store_->get(keys[r]);
    const RendezvousHello theirs =
        parse_rendezvous_hello(std::string_view(raw.data(), raw.size()), r);
    node_keys[static_cast<size_t>(r)] = theirs.node.empty() ? "host:" + theirs.host : theirs.node;
    if (theirs.host == host && cpus_overlap(my_cpus, theirs.cpus)) ++local_sharing_;
    const int their_world = theirs.world_size;
    TG_CHECK(their_world == env.world_size, "rendezvous: rank ", r, " was started with world size ",
             their_world, ", this rank (", env.rank, ") with ", env.world_size,
             " (every rank must be given the same world size)");
    TG_CHECK(theirs.config == fingerprint, "rendezvous: rank ", r,
             " runs another config than this rank (", env.rank,
             "); every rank must train the same run. Differences:",
             run.explain ? run.explain(fingerprint, theirs.config,
                                       "rank " + std::to_string(env.rank) + ": ",
                                       "rank " + std::to_string(r) + ": ")
                         : std::string(" (not listed)"));
    TG_CHECK(theirs.backend == backend_name, "rendezvous: rank ", r, " uses backend ",
             theirs.backend, ", this rank (", env.rank, ") ", backend_name,
             " (comm.backend = \"auto\" picks by device; give every rank the same device kind)");
    shared_gpu = shared_gpu || (!gpu.empty() && theirs.gpu == gpu);
    const int64_t their_start = theirs.start_step;
    TG_CHECK(their_start == start_step, "rendezvous: rank ", r, " starts at iteration ",
             their_start, ", this rank (", env.rank, ") at ", start_step,
             " (with --resume every rank must read the same checkpoint: --out must be on storage "
             "every node shares)");
  }

  // ---- the node layout ----------------------------------------------------------------------
  int local_size = 0;
  if (const auto it = env_vars.find("OMPI_COMM_WORLD_LOCAL_SIZE"); it != env_vars.end()) {
    try {
      local_size = std::stoi(it->second);
    } catch (const std::exception&) {
      local_size = 0;  // not a number: no check
    }
  }
  nodes_ = node_layout(node_keys, options.ranks_per_node, env.rank, local_size, &nodes_from_);

  // ---- the communicator ----------------------------------------------------------------------
  // comm.backend = auto with CUDA: NCCL needs one GPU per rank; ranks sharing a GPU use Gloo.
  // Every rank sees the same records, but only the ranks sharing a GPU know they do, so the
  // decision is agreed with a flag through the store.
  if (auto_cuda) {
    if (shared_gpu) store_->set(key("shared_gpu", env.rank), bytes_of("1"));
    store_->set(key("gpu_checked", env.rank), bytes_of("1"));
    std::vector<std::string> checked;
    for (int r = 0; r < env.world_size; ++r) checked.push_back(key("gpu_checked", r));
    store_->wait(checked, timeout_);
    for (int r = 0; r < env.world_size && !shared_gpu; ++r) {
      try {
        store_->wait({key("shared_gpu", r)}, milliseconds(1));
        shared_gpu = true;
      } catch (const Error&) {
      }
    }
    if (shared_gpu) backend = Backend::gloo;
  }
  CommOptions co;
  co.backend = backend;
  co.rank = env.rank;
  co.size = env.world_size;
  co.device = backend == Backend::nccl ? device : Device::cpu();
  co.timeout = timeout_;
  co.interface = options.interface;
  // Ranks of the --nproc launcher all run on this host: they listen on loopback only, not on
  // the address the host name resolves to (which other machines may reach).
  if (env.source == "launcher" && co.interface.empty()) co.hostname = "127.0.0.1";
  co.mac_key = mac_key;
  comm_ = make_communicator(co, *store_, prefix_);
  if (comm_->backend() == "gloo" && comm_->size() > 1)
    watcher_ = std::thread([this] { watch_for_failures(); });
}

ProcessGroup::~ProcessGroup() {
  stop_watching();
}

void ProcessGroup::watch_for_failures() {
  const std::string flag = prefix_ + "/abort";
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, kFailureWatchInterval, [&] { return watch_stop_; })) {
    lock.unlock();
    bool failed = false;
    std::string who;
    try {
      if (store_->check({flag})) {
        // Read through the store this group uses: with a job secret, a flag that a writer
        // without it put there does not verify, throws, and stops nothing.
        const std::vector<char> raw = store_->get(flag);
        const std::string r(raw.begin(), raw.end());
        const bool number =
            !r.empty() && r.size() <= 9 &&
            std::all_of(r.begin(), r.end(), [](char c) { return c >= '0' && c <= '9'; });
        who = number ? "rank " + r : "a rank";
        failed = true;
      }
    } catch (const std::exception&) {
      // The store did not answer, or the flag is not this job's: look again next time; the
      // collectives' own timeout still bounds the wait.
    }
    lock.lock();
    if (failed && !watch_stop_) {
      comm_->abort(who + " reported a failure");
      return;
    }
  }
}

void ProcessGroup::stop_watching() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::string node_key(const EnvMap& env, const std::string& host) {
  const auto node = env.find("SLURM_NODEID");
  const auto job = env.find("SLURM_JOB_ID");
  if (node != env.end() && job != env.end() && !node->second.empty())
    return "slurm-node:" + job->second + "/" + node->second;
  return "host:" + host;
}

NodeLayout node_layout(const std::vector<std::string>& keys, int ranks_per_node, int rank,
                       int local_size, std::string* from) {
  const int p = static_cast<int>(keys.size());
  NodeLayout l;
  if (ranks_per_node > 0) {
    l = NodeLayout::blocks(p, ranks_per_node);
    if (from) *from = "comm.ranks_per_node = " + std::to_string(ranks_per_node);
    return l;  // asked for: Open MPI's count is not checked against it
  }
  l = NodeLayout::from_keys(keys);
  const bool slurm = !keys.empty() && keys[0].rfind("slurm-node:", 0) == 0;
  if (from) *from = slurm ? "Slurm's node index" : "host names";
  if (local_size > 0 && rank >= 0 && rank < p) {
    const auto here = static_cast<int>(l.members(l.node_of[static_cast<size_t>(rank)]).size());
    TG_CHECK(here == local_size, "node layout: ", here, " ranks share this rank's ",
             slurm ? "Slurm node" : "host name", " (", keys[static_cast<size_t>(rank)],
             "), Open MPI counts ", local_size,
             " on its node (OMPI_COMM_WORLD_LOCAL_SIZE); set comm.ranks_per_node");
  }
  return l;
}

std::string ProcessGroup::key(const std::string& what, int rank) const {
  return prefix_ + "/" + what + "/" + std::to_string(rank);
}

std::string ProcessGroup::describe() const {
  return "rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + ", " +
         comm_->backend() + ", rendezvous " + redact_store_url(env_.rendezvous) + " (" +
         env_.source + ")" + (secret_source_.empty() ? "" : ", authenticated by " + secret_source_);
}

bool ProcessGroup::any(bool flag) {
  return max({flag ? 1 : 0})[0] != 0;
}

std::vector<int32_t> ProcessGroup::max(const std::vector<int32_t>& values) {
  const size_t bytes = values.size() * sizeof(int32_t);
  const std::vector<char> r =
      through_device(values.data(), bytes, bytes, [&](const void*, void* out) {
        comm_->allreduce(out, values.size(), DType::i32, ReduceOp::max);
      });
  std::vector<int32_t> out(values.size());
  std::memcpy(out.data(), r.data(), bytes);
  return out;
}

std::vector<double> ProcessGroup::sum(const std::vector<double>& values) {
  const size_t bytes = values.size() * sizeof(double);
  const std::vector<char> all =
      through_device(values.data(), bytes, bytes * static_cast<size_t>(size()),
                     [&](const void* in, void* out) { comm_->allgather(in, out, bytes); });
  std::vector<double> s(values.size(), 0.0);
  for (int r = 0; r < size(); ++r) {
    for (size_t i = 0; i < values.size(); ++i) {
      double x = 0.0;
      std::memcpy(&x, all.data() + bytes * static_cast<size_t>(r) + sizeof(double) * i,
                  sizeof(double));
      s[i] += x;
    }
  }
  return s;
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  TG_CHECK(t.is_contiguous(), "process group broadcast: the tensor must be contiguous");
  if (t.device() == comm_->device()) {
    comm_->broadcast(t.raw_data(), t.nbytes(), root);
    return;
  }
  Tensor staged = t.to(comm_->device());
  comm_->broadcast(staged.raw_data(), staged.nbytes(), root);
  t.copy_from(staged);
}

std::vector<char> ProcessGroup::gather_bytes(const std::vector<char>& mine, int root) {
  const bool is_root = rank() == root;
  std::vector<char> all = through_device(
      mine.data(), mine.size(), is_root ? mine.size() * static_cast<size_t>(size()) : 0,
      [&](const void* in, void* out) {
        comm_->gather(in, is_root ? out : nullptr, mine.size(), root);
      });
  return all;
}

// `in_bytes` from `in` and an `out_bytes` result buffer on the communicator's device (staged
// through it when that is a GPU; the result buffer starts as a copy of the input's first bytes,
// for in-place collectives); runs `collective(in, out)` there and returns the result on the host.
std::vector<char> ProcessGroup::through_device(
    const void* in, size_t in_bytes, size_t out_bytes,
    const std::function<void(const void* in, void* out)>& collective) {
  std::vector<char> host_in(static_cast<const char*>(in), static_cast<const char*>(in) + in_bytes);
  std::vector<char> result(std::max(out_bytes, size_t{1}));
  std::memcpy(result.data(), host_in.data(), std::min(in_bytes, out_bytes));
  if (comm_->device().is_cpu()) {
    collective(host_in.data(), result.data());
  } else {
    auto to_device = [&](const std::vector<char>& h) {
      Tensor t = Tensor::empty({static_cast<int64_t>(h.size())}, DType::u8, Device::cpu());
      std::memcpy(t.raw_data(), h.data(), h.size());
      return t.to(comm_->device());
    };
    Tensor din = to_device(host_in), dout = to_device(result);
    collective(din.raw_data(), dout.raw_data());
    Tensor back = dout.to(Device::cpu());
    std::memcpy(result.data(), back.raw_data(), result.size());
  }
  result.resize(out_bytes);
  return result;
}

std::string ProcessGroup::post_mortem(const std::string& error, milliseconds window) {
  const int me = env_.rank;
  stop_watching();
  try {
    store_->set(key("failed", me), bytes_of(error.empty() ? std::string("failed") : error));
  } catch (const std::exception&) {
    // Reported already (a second failure) or the store is gone: the others will see us as lost.
  }
  // Wake the ranks still waiting in a collective (see the top of process_group.h): the first
  // failing rank raises the flag (a later one finds it set), and this rank's own connections
  // close, so the peers waiting on it fail at once.
  try {
    const std::string flag = prefix_ + "/abort";
    if (!store_->check({flag})) store_->set(flag, bytes_of(std::to_string(me)));
  } catch (const std::exception&) {
    // Another rank raised it first, or the store is gone.
  }
  comm_->abort("rank " + std::to_string(me) + " failed");
  std::vector<std::string> keys;
  std::vector<int> others;
  for (int r = 0; r < env_.world_size; ++r) {
    if (r == me) continue;
    keys.push_back(key("failed", r));
    others.push_back(r);
  }
  std::vector<int> lost;
  std::string reports;
  try {
    const std::vector<int> missing = missing_after_wait(*store_, keys, window);
    for (size_t i = 0; i < others.size(); ++i) {
      if (std::find(missing.begin(), missing.end(), static_cast<int>(i)) != missing.end()) {
        lost.push_back(others[i]);
        continue;
      }
      const std::vector<char> raw = store_->get(keys[i]);
      reports += "\n  rank " + std::to_string(others[i]) +
                 " reported: " + std::string(raw.begin(), raw.end());
    }
  } catch (const std::exception& e) {
    return "rank " + std::to_string(me) + " of " + std::to_string(env_.world_size) + ": " + error +
           "\n  (the rendezvous store could not be read to find the failed rank: " + e.what() + ")";
  }
  std::string out;
  if (!lost.empty())
    out = "lost rank" + std::string(lost.size() > 1 ? "s " : " ") + join_ranks(lost) + " of " +
          std::to_string(env_.world_size) + " (no report within " +
          std::to_string(window.count() / 1000.0).substr(0, 4) +
          " s: killed, crashed, hung or cut off). ";
  out += "rank " + std::to_string(me) + ": " + error + reports;
  return out;
}

}  // namespace tg::comm
