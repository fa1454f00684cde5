// The exact ternary collectives (terngrad/exchange/ternary_collectives.h): cost model, algorithm
// choice and the three algorithms on top of any comm::Communicator. One explicit device switch per
// kernel call; temporaries are tensors from the device's caching allocator.
#include "terngrad/exchange/ternary_collectives.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>

#include "comm/gloo_wire.h"
#include "comm/wire_model.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"
#include "terngrad/ternary_fields.h"

namespace tg::tern {

namespace {

constexpr TernaryAlgorithm kConcrete[] = {TernaryAlgorithm::allgather,
                                          TernaryAlgorithm::packed_allreduce, TernaryAlgorithm::ps};

void check_shape(const TernaryShape& s) {
  TG_CHECK(s.n >= 0, "ternary collective: n = ", s.n, " (expected >= 0)");
  TG_CHECK(s.ranks >= 1, "ternary collective: P = ", s.ranks, " ranks (expected >= 1)");
  TG_CHECK(s.workers_per_rank >= 1, "ternary collective: W = ", s.workers_per_rank,
           " workers per rank (expected >= 1)");
  TG_CHECK(static_cast<int64_t>(s.ranks) * s.workers_per_rank <= (int64_t{1} << 30),
           "ternary collective: N = ", s.ranks, " x ", s.workers_per_rank,
           " workers (expected at most 2^30)");
}

// What rank `rank` moves for one collective call of `a` on wb = W * (one worker's code bytes) and
// kb = the k-bit field bytes.
comm::WireBytes rank_bytes(TernaryAlgorithm a, uint64_t wb, uint64_t kb, int p, bool gloo,
                           int rank) {
  comm::WireBytes w;
  switch (a) {
    case TernaryAlgorithm::ps:
      comm::wire_model::add(w, gloo ? comm::gloo_wire::gather(wb, p, rank, 0)
                                    : comm::wire_model::gather(wb, p, rank, 0));
      comm::wire_model::add(w, gloo ? comm::gloo_wire::broadcast(kb, p, rank, 0)
                                    : comm::wire_model::broadcast(kb, p, rank, 0));
      return w;
    case TernaryAlgorithm::allgather:
      return gloo ? comm::gloo_wire::allgather(wb, p) : comm::wire_model::allgather(wb, p);
    case TernaryAlgorithm::packed_allreduce:
      return gloo ? comm::gloo_wire::allreduce(kb, sizeof(uint64_t), p, rank)
                  : comm::wire_model::allreduce(kb, p);
    case TernaryAlgorithm::automatic:
      break;
  }
  TG_THROW("ternary_cost: algorithm '", name(a), "' has no cost of its own (resolve it first)");
}

// ---- the chunk plan of a bucket ---------------------------------------------------------------

// The part of segment `seg` inside one chunk: elements [first, first + n) of the segment, whose
// codes start `byte` bytes into the chunk (of one worker); their sums sit at `elem` in the chunk's
// compact int32 vector and their k-bit fields start at word `word` of the chunk's words.
struct Piece {
  size_t seg = 0;
  int64_t byte = 0, first = 0, n = 0, elem = 0, word = 0;
};

// Bytes [begin, begin + bytes) of every worker's bucket; elem_base / word_base: where the chunk's
// int32 sums and words start in whole-bucket buffers (chunks back to back).
struct Chunk {
  int64_t begin = 0, bytes = 0;
  int64_t elems = 0, words = 0, elem_base = 0, word_base = 0;
  std::vector<Piece> pieces;
};

struct Plan {
  int64_t bucket_bytes = 0, elems = 0, words = 0;  // totals over the chunks
  std::vector<Chunk> chunks;
};

int64_t elements_per_byte(tern::PackFormat f) {
  return f == tern::PackFormat::two_bit ? 4 : 5;
}

// k: the sum-field width of the N workers (the word counts depend on it).
Plan plan_bucket(const std::vector<int64_t>& numel, tern::PackFormat f, int64_t chunk_bytes,
                 int k) {
  TG_CHECK(chunk_bytes >= 0, "ternary bucket: chunk_bytes = ", chunk_bytes, " (expected >= 0)");
  const size_t S = numel.size();
  std::vector<int64_t> off(S + 1, 0);
  for (size_t s = 0; s < S; ++s) {
    TG_CHECK(numel[s] >= 0, "ternary bucket: segment ", s, " has ", numel[s],
             " elements (expected >= 0)");
    off[s + 1] = off[s] + static_cast<int64_t>(tern::packed_bytes(f, numel[s]));
  }
  Plan plan;
  plan.bucket_bytes = off[S];
  const int64_t step = chunk_bytes > 0 ? chunk_bytes : std::max<int64_t>(plan.bucket_bytes, 1);
  const int64_t epb = elements_per_byte(f);
  size_t s = 0;
  for (int64_t b0 = 0; b0 < plan.bucket_bytes; b0 += step) {
    Chunk c;
    c.begin = b0;
    c.bytes = std::min(step, plan.bucket_bytes - b0);
    c.elem_base = plan.elems;
    c.word_base = plan.words;
    const int64_t b1 = b0 + c.bytes;
    while (s < S && off[s + 1] <= b0) ++s;
    for (size_t t = s; t < S && off[t] < b1; ++t) {
      if (numel[t] == 0) continue;
      const int64_t x = std::max(b0, off[t]), y = std::min(b1, off[t + 1]);
      Piece p;
      p.seg = t;
      p.byte = x - b0;
      p.first = (x - off[t]) * epb;
      p.n = std::min(numel[t], (y - off[t]) * epb) - p.first;
      p.elem = c.elems;
      p.word = c.words;
      c.elems += p.n;
      c.words += sum_field_words(p.n, k);
      c.pieces.push_back(p);
    }
    plan.elems += c.elems;
    plan.words += c.words;
    plan.chunks.push_back(std::move(c));
  }
  return plan;
}

void check_bucket_shape(const TernaryBucketShape& s) {
  check_shape({0, s.ranks, s.workers_per_rank, s.format, s.backend});
  tern::detail::check_format(s.format, "ternary bucket");
}

comm::WireBytes bucket_rank_bytes(TernaryAlgorithm a, const TernaryBucketShape& s, const Plan& plan,
                                  int rank) {
  comm::WireBytes total;
  for (const Chunk& c : plan.chunks)
    comm::wire_model::add(
        total, rank_bytes(a, static_cast<uint64_t>(s.workers_per_rank * c.bytes),
                          8 * static_cast<uint64_t>(c.words), s.ranks, s.backend == "gloo", rank));
  return total;
}

// ---- device dispatch ----------------------------------------------------------------------

// For every piece p of `pieces`: acc_of(p) += the codes of `count` vectors of p.n elements,
// vector v at base + p.byte + v * stride. One bucket call (CUDA: one launch per 60 pieces).
template <class AccOf>
void unpack_pieces(const Device& d, const std::vector<Piece>& pieces, const uint8_t* base,
                   int64_t count, size_t stride, tern::PackFormat f, AccOf acc_of) {
  std::vector<tern::UnpackTask> tasks;
  tasks.reserve(pieces.size());
  for (const Piece& p : pieces) tasks.push_back({base + p.byte, count, stride, p.n, acc_of(p)});
  switch (d.type) {
    case DeviceType::cpu:
      tern::unpack_accumulate_bucket_cpu(tasks.data(), tasks.size(), f);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      tern::unpack_accumulate_bucket_cuda(tasks.data(), tasks.size(), f);
      return;
#else
      break;
#endif
  }
  TG_THROW("ternary collective on ", d.str(), ": this build has no CUDA support");
}

void pack_fields(const Device& d, const int32_t* v, int64_t n, int32_t offset, int k,
                 uint64_t* words) {
  switch (d.type) {
    case DeviceType::cpu:
      pack_sum_fields_cpu(v, n, offset, k, words);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      pack_sum_fields_cuda(v, n, offset, k, words);
      return;
#else
      break;
#endif
  }
  TG_THROW("ternary collective on ", d.str(), ": this build has no CUDA support");
}

void unpack_fields(const Device& d, const uint64_t* words, int64_t n, int k, int32_t offset,
                   int32_t* acc) {
  switch (d.type) {
    case DeviceType::cpu:
      unpack_sum_fields_accumulate_cpu(words, n, k, offset, acc);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      unpack_sum_fields_accumulate_cuda(words, n, k, offset, acc);
      return;
#else
      break;
#endif
  }
  TG_THROW("ternary collective on ", d.str(), ": this build has no CUDA support");
}

// Kernels launch on the current device: make it the communicator's for the whole call.
struct OptionalDeviceGuard {
  explicit OptionalDeviceGuard(const Device& d) {
    if (d.is_cuda()) guard = std::make_unique<cuda::DeviceGuard>(d.index);
  }
  std::unique_ptr<cuda::DeviceGuard> guard;
};

// raw device-to-device byte copy (same device)
void copy_bytes(const Device& d, uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n <= 0) return;
  if (d.is_cuda())
    cuda::copy_d2d(d.index, dst, src, static_cast<size_t>(n));
  else
    std::memcpy(dst, src, static_cast<size_t>(n));
}

// Runs chunks c = 0 .. C - 1 as pre(c) -> comm(c) -> post(c). With a collectives thread: comm on
// that thread, pre(c + 1) and post(c) on this one while comm(c + 1) runs; else all in order on
// this thread. The collectives thread is the only one calling the communicator meanwhile.
void run_chunks(int64_t chunks, WorkerThread* collectives, const std::function<void(int64_t)>& pre,
                const std::function<void(int64_t)>& comm,
                const std::function<void(int64_t)>& post) {
  if (collectives == nullptr || chunks < 2) {
    for (int64_t c = 0; c < chunks; ++c) {
      pre(c);
      comm(c);
      post(c);
    }
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  int64_t prepared = 0, done = 0;
  bool stop = false;
  std::exception_ptr comm_error, main_error;
  pre(0);
  prepared = 1;
  std::future<void> issued = collectives->submit([&] {
    try {
      for (int64_t c = 0; c < chunks; ++c) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return prepared > c || stop; });
          if (stop) return;
        }
        comm(c);
        {
          std::lock_guard<std::mutex> lk(mu);
          done = c + 1;
        }
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      comm_error = std::current_exception();
    }
    cv.notify_all();
  });
  try {
    for (int64_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) {
        pre(c + 1);
        {
          std::lock_guard<std::mutex> lk(mu);
          prepared = c + 2;
        }
        cv.notify_all();
      }
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return done > c || comm_error; });
        if (comm_error) break;
      }
      post(c);
    }
  } catch (...) {
    main_error = std::current_exception();
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  issued.wait();  // a collective in flight finishes or fails (communicator timeout) first
  if (comm_error) std::rethrow_exception(comm_error);
  if (main_error) std::rethrow_exception(main_error);
}

struct BucketRun {
  comm::Communicator& comm;
  Device d;
  const uint8_t* codes;  // W worker buckets of plan.bucket_bytes
  int workers;
  int64_t total;  // N = P * W
  tern::PackFormat f;
  int k;
  const std::vector<int32_t*>& acc;
  const Plan& plan;
  WorkerThread* collectives;  // null: the chunks' collectives on the caller's thread
};

// This rank's W slices of chunk c, contiguous (for W = 1 the bucket itself).
struct SendStage {
  Tensor buf;
  const uint8_t* at(const BucketRun& r, const Chunk& c) const {
    return r.workers == 1 ? r.codes + c.begin : buf.data<uint8_t>() + r.workers * c.begin;
  }
  void stage(const BucketRun& r, const Chunk& c) {
    if (r.workers == 1) return;
    uint8_t* dst = buf.data<uint8_t>() + r.workers * c.begin;
    for (int w = 0; w < r.workers; ++w)
      copy_bytes(r.d, dst + w * c.bytes, r.codes + w * r.plan.bucket_bytes + c.begin, c.bytes);
  }
  explicit SendStage(const BucketRun& r) {
    if (r.workers > 1) buf = Tensor::empty({r.workers * r.plan.bucket_bytes}, DType::u8, r.d);
  }
};

// acc[piece] += the unpacked fields of every piece of chunk c.
void unpack_chunk_fields(const BucketRun& r, const Chunk& c, const uint64_t* words) {
  for (const Piece& p : c.pieces)
    unpack_fields(r.d, words + c.word_base + p.word, p.n, r.k, static_cast<int32_t>(r.total),
                  r.acc[p.seg] + p.first);
}

// sums (compact, chunk c) -> k-bit fields shifted by `offset`.
void pack_chunk_fields(const BucketRun& r, const Chunk& c, const int32_t* sums, int32_t offset,
                       uint64_t* words) {
  for (const Piece& p : c.pieces)
    pack_fields(r.d, sums + c.elem_base + p.elem, p.n, offset, r.k, words + c.word_base + p.word);
}

void run_ps(const BucketRun& r) {
  const bool root = r.comm.rank() == 0;
  SendStage send(r);
  Tensor all, sums;
  if (root) {
    all = Tensor::empty({r.total * r.plan.bucket_bytes}, DType::u8, r.d);
    sums = Tensor::zeros({r.plan.elems}, DType::i32, r.d);
  }
  Tensor words = Tensor::empty({r.plan.words}, DType::u64, r.d);
  uint64_t* wp = words.data<uint64_t>();
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t c) { send.stage(r, r.plan.chunks[c]); },
      [&](int64_t i) {
        const Chunk& c = r.plan.chunks[i];
        const size_t bytes = static_cast<size_t>(r.workers * c.bytes);
        if (root) {
          uint8_t* got = all.data<uint8_t>() + r.total * c.begin;
          r.comm.gather(send.at(r, c), got, bytes, 0);
          int32_t* sp = sums.data<int32_t>();
          unpack_pieces(r.d, c.pieces, got, r.total, static_cast<size_t>(c.bytes), r.f,
                        [&](const Piece& p) { return sp + c.elem_base + p.elem; });
          pack_chunk_fields(r, c, sp, static_cast<int32_t>(r.total), wp);
        } else {
          r.comm.gather(send.at(r, c), nullptr, bytes, 0);
        }
        r.comm.broadcast(wp + c.word_base, static_cast<size_t>(c.words) * 8, 0);
      },
      [&](int64_t c) { unpack_chunk_fields(r, r.plan.chunks[c], wp); });
}

void run_allgather(const BucketRun& r) {
  SendStage send(r);
  Tensor all = Tensor::empty({r.total * r.plan.bucket_bytes}, DType::u8, r.d);
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t c) { send.stage(r, r.plan.chunks[c]); },
      [&](int64_t i) {
        const Chunk& c = r.plan.chunks[i];
        r.comm.allgather(send.at(r, c), all.data<uint8_t>() + r.total * c.begin,
                         static_cast<size_t>(r.workers * c.bytes));
      },
      [&](int64_t i) {
        const Chunk& c = r.plan.chunks[i];
        const uint8_t* got = all.data<uint8_t>() + r.total * c.begin;
        unpack_pieces(r.d, c.pieces, got, r.total, static_cast<size_t>(c.bytes), r.f,
                      [&](const Piece& p) { return r.acc[p.seg] + p.first; });
      });
}

void run_packed_allreduce(const BucketRun& r) {
  Tensor local = Tensor::zeros({r.plan.elems}, DType::i32, r.d);
  Tensor words = Tensor::empty({r.plan.words}, DType::u64, r.d);
  int32_t* lp = local.data<int32_t>();
  uint64_t* wp = words.data<uint64_t>();
  const auto stride = static_cast<size_t>(r.plan.bucket_bytes);
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t i) {
        const Chunk& c = r.plan.chunks[i];
        unpack_pieces(r.d, c.pieces, r.codes + c.begin, r.workers, stride, r.f,
                      [&](const Piece& p) { return lp + c.elem_base + p.elem; });
        pack_chunk_fields(r, c, lp, r.workers, wp);
      },
      [&](int64_t i) {
        const Chunk& c = r.plan.chunks[i];
        r.comm.allreduce(wp + c.word_base, c.words, DType::u64, comm::ReduceOp::sum);
      },
      [&](int64_t c) { unpack_chunk_fields(r, r.plan.chunks[c], wp); });
}

}  // namespace

const char* name(TernaryAlgorithm a) {
  switch (a) {
    case TernaryAlgorithm::ps:
      return "ps";
    case TernaryAlgorithm::allgather:
      return "allgather";
    case TernaryAlgorithm::packed_allreduce:
      return "packed-allreduce";
    case TernaryAlgorithm::automatic:
      return "auto";
  }
  return "?";
}

std::vector<std::string> ternary_algorithm_names() {
  return {"auto", "ps", "allgather", "packed-allreduce"};
}

TernaryAlgorithm parse_ternary_algorithm(std::string_view s) {
  if (s == "auto") return TernaryAlgorithm::automatic;
  if (s == "ps") return TernaryAlgorithm::ps;
  if (s == "allgather") return TernaryAlgorithm::allgather;
  if (s == "packed-allreduce" || s == "packed_allreduce") return TernaryAlgorithm::packed_allreduce;
  std::string known;
  for (const std::string& n : ternary_algorithm_names()) known += (known.empty() ? "" : ", ") + n;
  TG_THROW("unknown ternary aggregation algorithm '", s, "' (known: ", known, ")");
}

TernaryCost ternary_cost(TernaryAlgorithm algorithm, const TernaryShape& shape, int rank) {
  check_shape(shape);
  return ternary_bucket_cost(
      algorithm, {{shape.n}, shape.ranks, shape.workers_per_rank, shape.format, shape.backend, 0},
      rank);
}

TernaryAlgorithm choose_ternary_algorithm(const TernaryShape& shape) {
  check_shape(shape);
  return choose_ternary_bucket_algorithm(
      {{shape.n}, shape.ranks, shape.workers_per_rank, shape.format, shape.backend, 0});
}

int64_t bucket_code_bytes(const std::vector<int64_t>& numel, tern::PackFormat format) {
  tern::detail::check_format(format, "bucket_code_bytes");
  int64_t b = 0;
  for (int64_t n : numel) b += static_cast<int64_t>(tern::packed_bytes(format, n));
  return b;
}

TernaryCost ternary_bucket_cost(TernaryAlgorithm algorithm, const TernaryBucketShape& shape,
                                int rank) {
  check_bucket_shape(shape);
  TG_CHECK(rank >= 0 && rank < shape.ranks, "ternary_cost: rank ", rank, " (expected 0 .. ",
           shape.ranks - 1, ")");
  const int k = sum_field_bits(static_cast<int64_t>(shape.ranks) * shape.workers_per_rank);
  const Plan plan = plan_bucket(shape.numel, shape.format, shape.chunk_bytes, k);
  TernaryCost c;
  c.rank = bucket_rank_bytes(algorithm, shape, plan, rank);
  // ps loads the server (rank 0) most; the others load every rank (almost) alike. P is small.
  for (int r = 0; r < shape.ranks; ++r) {
    const comm::WireBytes w = r == rank ? c.rank : bucket_rank_bytes(algorithm, shape, plan, r);
    c.busiest = std::max(c.busiest, w.sent + w.received);
  }
  return c;
}

TernaryAlgorithm choose_ternary_bucket_algorithm(const TernaryBucketShape& shape) {
  TernaryAlgorithm best = kConcrete[0];
  uint64_t best_bytes = ternary_bucket_cost(best, shape, 0).busiest;
  for (TernaryAlgorithm a : kConcrete) {
    const uint64_t bytes = ternary_bucket_cost(a, shape, 0).busiest;
    if (bytes < best_bytes) {
      best = a;
      best_bytes = bytes;
    }
  }
  return best;
}

TernaryResult ternary_aggregate(comm::Communicator& comm, TernaryAlgorithm algorithm,
                                const uint8_t* codes, int workers, int64_t n,
                                tern::PackFormat format, int32_t* acc) {
  check_shape({n, comm.size(), workers, format, comm.backend()});
  return ternary_aggregate_bucket(comm, algorithm, codes, workers, {n}, format, {acc});
}

TernaryResult ternary_aggregate_bucket(comm::Communicator& comm, TernaryAlgorithm algorithm,
                                       const uint8_t* codes, int workers,
                                       const std::vector<int64_t>& numel, tern::PackFormat format,
                                       const std::vector<int32_t*>& acc,
                                       const TernaryPipeline& pipeline) {
  const TernaryBucketShape shape{numel,  comm.size(),    workers,
                                 format, comm.backend(), pipeline.chunk_bytes};
  check_bucket_shape(shape);
  TG_CHECK(acc.size() == numel.size(), "ternary collective on rank ", comm.rank(), ": ", acc.size(),
           " accumulators for ", numel.size(), " segments (expected one each)");
  const int64_t total = static_cast<int64_t>(comm.size()) * workers;
  const int k = sum_field_bits(total);
  const Plan plan = plan_bucket(numel, format, pipeline.chunk_bytes, k);
  for (size_t s = 0; s < numel.size(); ++s)
    TG_CHECK(numel[s] == 0 || (codes != nullptr && acc[s] != nullptr),
             "ternary collective on rank ", comm.rank(), ": null codes or accumulator for segment ",
             s, " of ", numel[s], " elements");
  TernaryResult result{algorithm, {}};
  if (algorithm == TernaryAlgorithm::automatic)
    result.algorithm = choose_ternary_bucket_algorithm(shape);
  // Every rank knows the sizes, so an empty bucket is skipped by all ranks alike (no zero-byte
  // messages).
  if (plan.chunks.empty()) return result;

  const comm::WireBytes before = comm.wire();
  OptionalDeviceGuard guard(comm.device());
  const BucketRun run{
      comm,  comm.device(),
      codes, workers,
      total, format,
      k,     acc,
      plan,  comm.size() > 1 && comm.device().is_cpu() ? pipeline.collectives : nullptr};
  switch (result.algorithm) {
    case TernaryAlgorithm::ps:
      run_ps(run);
      break;
    case TernaryAlgorithm::allgather:
      run_allgather(run);
      break;
    case TernaryAlgorithm::packed_allreduce:
      run_packed_allreduce(run);
      break;
    case TernaryAlgorithm::automatic:
      break;
  }
  const comm::WireBytes after = comm.wire();
  result.wire = {after.sent - before.sent, after.received - before.received};
  return result;
}

}  // namespace tg::tern
