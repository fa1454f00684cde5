#include "train/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "nn/autograd/tape.h"
#include "nn/core/allocator.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"
#include "nn/ops/conv2d.h"
#include "nn/ops/softmax_xent.h"

namespace tg::train {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The kB value of the line starting with `key` in /proc's "Key:   N kB" format, as bytes.
int64_t kb_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    long long kb = -1;
    if (std::sscanf(line.c_str() + key.size(), " %lld", &kb) == 1 && kb >= 0) return kb * 1024;
  }
  return -1;
}

int64_t parse_count(const std::string& text) {
  long long v = -1;
  if (std::sscanf(text.c_str(), " %lld", &v) != 1 || v < 0) return -1;
  return v;
}

// The size classes of the convolutions' scratch in `shapes` at `images` per batch, into `out`.
void workspace_sizes(const std::vector<Conv2dShape>& shapes, int64_t images,
                     std::vector<size_t>* out) {
  for (Conv2dShape s : shapes) {
    s.N = images;
    if (!conv2d_cpu_uses_workspace(s)) continue;  // the task path: its threads' own scratch
    out->push_back(CachingAllocator::round_size(static_cast<size_t>(conv2d_workspace_floats(s)) *
                                                sizeof(float)));
  }
}

// The bytes of the distinct sizes in `sizes`: each op frees its scratch, but a freed block is
// kept for its size class (nn/core/allocator.h) and reused only by a block of the same class.
int64_t distinct_bytes(std::vector<size_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  int64_t total = 0;
  for (size_t b : sizes) total += static_cast<int64_t>(b);
  return total;
}

int64_t workspace_bytes(const std::vector<Conv2dShape>& shapes, int64_t images) {
  std::vector<size_t> sizes;
  workspace_sizes(shapes, images, &sizes);
  return distinct_bytes(sizes);
}

// What a pass at n images makes the caching allocator hold, from an empty cache: every block of
// every size it allocates stays held afterwards (a freed block is kept for its size class, and
// the sizes of a pass are nearly all distinct), so this, not the peak of bytes in use at once, is
// what the pass adds to the resident set for good. Measured at 1 and 2 images after one pass at
// 1 image that allocates what the run keeps (the parameter gradients). The convolutions' scratch
// grows with the images only up to its chunk (nn/ops/conv2d_kernels.h), so it is taken out of the
// two before the straight line through them is drawn, and added back at the batch asked for
// (conv_workspace_bytes).
template <class Pass>
ActivationBytes probe(const Device& d, Pass&& pass) {
  CachingAllocator& alloc = allocator_for(d);
  conv2d_record_shapes(true);
  pass(1);
  auto held_by = [&](int64_t n) {
    alloc.empty_cache();
    const AllocatorStats before = alloc.stats();
    pass(n);
    const AllocatorStats after = alloc.stats();
    return static_cast<int64_t>(after.in_use_bytes + after.cached_bytes) -
           static_cast<int64_t>(before.in_use_bytes + before.cached_bytes);
  };
  const int64_t h1 = held_by(1), h2 = held_by(2);
  alloc.empty_cache();
  ActivationBytes a;
  a.convs = conv2d_recorded_shapes();
  conv2d_record_shapes(false);
  const int64_t act1 = h1 - workspace_bytes(a.convs, 1), act2 = h2 - workspace_bytes(a.convs, 2);
  a.per_image = static_cast<double>(std::max<int64_t>(0, act2 - act1));
  a.fixed = std::max<int64_t>(0, act1 - static_cast<int64_t>(a.per_image));
  return a;
}

Tensor probe_images(const Net& net, int64_t n) {
  const NetInfo& in = net.info();
  return Tensor::zeros({n, in.in_channels, in.image_size, in.image_size}, DType::f32, net.device());
}

}  // namespace

int64_t ActivationBytes::at(int64_t images) const {
  return fixed + static_cast<int64_t>(per_image * static_cast<double>(images));
}

int64_t conv_workspace_bytes(const ActivationBytes& train, int64_t train_images,
                             const ActivationBytes& eval, int64_t eval_images) {
  std::vector<size_t> sizes;
  workspace_sizes(train.convs, train_images, &sizes);
  workspace_sizes(eval.convs, eval_images, &sizes);
  return distinct_bytes(sizes);
}

int64_t meminfo_available_bytes(const std::string& meminfo) {
  return kb_field(meminfo, "MemAvailable:");
}

int64_t meminfo_rss_bytes(const std::string& status) {
  return kb_field(status, "VmRSS:");
}

int64_t cgroup_room_bytes(const std::string& limit, const std::string& usage) {
  if (limit.rfind("max", 0) == 0) return -1;
  const int64_t l = parse_count(limit), u = parse_count(usage);
  // cgroup v1 says "no limit" with a number near 2^63.
  if (l < 0 || u < 0 || l >= (int64_t{1} << 60)) return -1;
  return std::max<int64_t>(0, l - u);
}

MemoryLimit memory_limit() {
  MemoryLimit best;
  auto consider = [&](int64_t bytes, const std::string& source) {
    if (bytes < 0) return;
    if (best.bytes < 0 || bytes < best.bytes) best = {bytes, source};
  };
  consider(meminfo_available_bytes(read_text("/proc/meminfo")), "MemAvailable");
  // This process's cgroup and its ancestors (a limit may sit on any of them).
  std::istringstream cg(read_text("/proc/self/cgroup"));
  std::string line;
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers.find("memory") == std::string::npos) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    while (true) {
      const std::string dir = root + (path == "/" ? "" : path);
      const std::string limit_file = dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes");
      const std::string usage_file = dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes");
      consider(cgroup_room_bytes(read_text(limit_file), read_text(usage_file)),
               "cgroup " + dir + " (" +
                   (v2 ? "memory.max - memory.current"
                       : "memory.limit_in_bytes - memory.usage_in_bytes") +
                   ")");
      if (path.empty() || path == "/") break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  if (const char* v = std::getenv("TG_MEMORY_LIMIT_MB"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double mb = std::strtod(v, &end);
    TG_CHECK(end != v && *end == '\0' && mb > 0, "TG_MEMORY_LIMIT_MB = '", v,
             "' (expected a positive number of MiB)");
    // The most this process may hold in all: what it holds already is not left.
    const int64_t limit = static_cast<int64_t>(mb * 1024 * 1024);
    consider(std::max<int64_t>(0, limit - std::max<int64_t>(0, resident_bytes())),
             "TG_MEMORY_LIMIT_MB=" + std::string(v) + " less this process's resident set");
  }
  return best;
}

int64_t resident_bytes() {
  return meminfo_rss_bytes(read_text("/proc/self/status"));
}

ActivationBytes probe_training_activations(Net& net) {
  const Device d = net.device();
  std::vector<Tensor> saved;  // batch-norm running statistics, put back afterwards
  for (const auto& [name, t] : net.buffers()) saved.push_back(t.clone());
  ParamArena& arena = net.arena();
  const ActivationBytes a = probe(d, [&](int64_t n) {
    arena.bind_grads(Tensor());
    arena.zero_grad_lazily();
    ForwardContext ctx;
    ctx.training = true;
    Tensor y = Tensor::zeros({n}, DType::i32, d);
    backward(softmax_cross_entropy(net.forward(probe_images(net, n), ctx), y));
  });
  arena.zero_grad_lazily();
  for (size_t i = 0; i < saved.size(); ++i) {
    Tensor dst = net.buffers()[i].second;
    dst.copy_from(saved[i]);
  }
  return a;
}

ActivationBytes probe_eval_activations(Net& net) {
  const Device d = net.device();
  return probe(d, [&](int64_t n) {
    NoGradGuard ng;
    ForwardContext ctx;
    ctx.training = false;
    Tensor y = Tensor::zeros({n}, DType::i32, d);
    softmax_cross_entropy(net.forward(probe_images(net, n), ctx), y);
  });
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  return buf;
}

std::string MemoryPlan::describe() const {
  return format_bytes(peak()) + ": resident " + format_bytes(resident) +
         " (data, parameters, EMA, libraries), training activations " +
         format_bytes(train_activations) + " (" + std::to_string(images_per_worker) +
         " images per worker), evaluation " + format_bytes(eval_activations) + " (" +
         std::to_string(eval_batch) + " images), convolution scratch " + format_bytes(workspace) +
         ", gradients " + format_bytes(gradients) + ", optimizer " + format_bytes(optimizer) +
         ", input batches " + format_bytes(input);
}

}  // namespace tg::train
