// The exact ternary collectives (comm/ternary_collectives.h): cost model, algorithm choice and
// the three algorithms on top of any Communicator. One explicit device switch per kernel call;
// temporaries are tensors from the device's caching allocator.
#include "comm/ternary_collectives.h"

#include <algorithm>
#include <memory>

#include "comm/gloo_comm.h"
#include "comm/ternary_fields.h"
#include "comm/wire_model.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"

namespace tg::comm {

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

uint64_t code_bytes(const TernaryShape& s) {
  return tern::packed_bytes(s.format, s.n);
}
uint64_t field_bytes(const TernaryShape& s) {
  const int k = sum_field_bits(static_cast<int64_t>(s.ranks) * s.workers_per_rank);
  return 8 * static_cast<uint64_t>(sum_field_words(s.n, k));
}

WireBytes rank_bytes(TernaryAlgorithm a, const TernaryShape& s, int rank) {
  const uint64_t wb = s.workers_per_rank * code_bytes(s);
  const bool gloo = s.backend == "gloo";
  const int p = s.ranks;
  WireBytes w;
  switch (a) {
    case TernaryAlgorithm::ps:
      wire_model::add(
          w, gloo ? gloo_wire::gather(wb, p, rank, 0) : wire_model::gather(wb, p, rank, 0));
      wire_model::add(w, gloo ? gloo_wire::broadcast(field_bytes(s), p, rank, 0)
                              : wire_model::broadcast(field_bytes(s), p, rank, 0));
      return w;
    case TernaryAlgorithm::allgather:
      return gloo ? gloo_wire::allgather(wb, p) : wire_model::allgather(wb, p);
    case TernaryAlgorithm::packed_allreduce:
      return gloo ? gloo_wire::allreduce(field_bytes(s), sizeof(uint64_t), p, rank)
                  : wire_model::allreduce(field_bytes(s), p);
    case TernaryAlgorithm::automatic:
      break;
  }
  TG_THROW("ternary_cost: algorithm '", name(a), "' has no cost of its own (resolve it first)");
}

// ---- device dispatch ----------------------------------------------------------------------

// acc += the codes of `count` vectors of n elements, vector v at packed + v * stride.
void unpack_codes(const Device& d, const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                  tern::PackFormat f, int32_t* acc) {
  switch (d.type) {
    case DeviceType::cpu:
      tern::unpack_accumulate_many_cpu(packed, count, stride, n, f, acc);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      tern::unpack_accumulate_many_cuda(packed, count, stride, n, f, acc);
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

// ---- the algorithms -------------------------------------------------------------------------

void run_ps(Communicator& comm, const uint8_t* codes, int workers, int64_t n, tern::PackFormat f,
            int32_t* acc) {
  const Device d = comm.device();
  const int p = comm.size();
  const int64_t total = static_cast<int64_t>(p) * workers;
  const size_t b = tern::packed_bytes(f, n);
  const int k = sum_field_bits(total);
  const int64_t m = sum_field_words(n, k);
  Tensor words = Tensor::empty({m}, DType::u64, d);
  if (comm.rank() == 0) {
    Tensor all = Tensor::empty({static_cast<int64_t>(total * b)}, DType::u8, d);
    comm.gather(codes, all.data<uint8_t>(), workers * b, 0);
    Tensor sums = Tensor::zeros({n}, DType::i32, d);
    unpack_codes(d, all.data<uint8_t>(), total, b, n, f, sums.data<int32_t>());
    pack_fields(d, sums.data<int32_t>(), n, static_cast<int32_t>(total), k, words.data<uint64_t>());
  } else {
    comm.gather(codes, nullptr, workers * b, 0);
  }
  comm.broadcast(words.data<uint64_t>(), static_cast<size_t>(m) * 8, 0);
  unpack_fields(d, words.data<uint64_t>(), n, k, static_cast<int32_t>(total), acc);
}

void run_allgather(Communicator& comm, const uint8_t* codes, int workers, int64_t n,
                   tern::PackFormat f, int32_t* acc) {
  const Device d = comm.device();
  const int64_t total = static_cast<int64_t>(comm.size()) * workers;
  const size_t b = tern::packed_bytes(f, n);
  Tensor all = Tensor::empty({static_cast<int64_t>(total * b)}, DType::u8, d);
  comm.allgather(codes, all.data<uint8_t>(), workers * b);
  unpack_codes(d, all.data<uint8_t>(), total, b, n, f, acc);
}

void run_packed_allreduce(Communicator& comm, const uint8_t* codes, int workers, int64_t n,
                          tern::PackFormat f, int32_t* acc) {
  const Device d = comm.device();
  const int64_t total = static_cast<int64_t>(comm.size()) * workers;
  const size_t b = tern::packed_bytes(f, n);
  const int k = sum_field_bits(total);
  const int64_t m = sum_field_words(n, k);
  Tensor local = Tensor::zeros({n}, DType::i32, d);
  unpack_codes(d, codes, workers, b, n, f, local.data<int32_t>());
  Tensor words = Tensor::empty({m}, DType::u64, d);
  pack_fields(d, local.data<int32_t>(), n, workers, k, words.data<uint64_t>());
  comm.allreduce(words.data<uint64_t>(), m, DType::u64, ReduceOp::sum);
  unpack_fields(d, words.data<uint64_t>(), n, k, static_cast<int32_t>(total), acc);
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
  TG_CHECK(rank >= 0 && rank < shape.ranks, "ternary_cost: rank ", rank, " (expected 0 .. ",
           shape.ranks - 1, ")");
  TernaryCost c;
  c.rank = rank_bytes(algorithm, shape, rank);
  // ps loads the server (rank 0) most; the others load every rank (almost) alike. P is small.
  for (int r = 0; r < shape.ranks; ++r) {
    const WireBytes w = r == rank ? c.rank : rank_bytes(algorithm, shape, r);
    c.busiest = std::max(c.busiest, w.sent + w.received);
  }
  return c;
}

TernaryAlgorithm choose_ternary_algorithm(const TernaryShape& shape) {
  TernaryAlgorithm best = kConcrete[0];
  uint64_t best_bytes = ternary_cost(best, shape, 0).busiest;
  for (TernaryAlgorithm a : kConcrete) {
    const uint64_t bytes = ternary_cost(a, shape, 0).busiest;
    if (bytes < best_bytes) {
      best = a;
      best_bytes = bytes;
    }
  }
  return best;
}

TernaryResult ternary_aggregate(Communicator& comm, TernaryAlgorithm algorithm,
                                const uint8_t* codes, int workers, int64_t n,
                                tern::PackFormat format, int32_t* acc) {
  const TernaryShape shape{n, comm.size(), workers, format, comm.backend()};
  check_shape(shape);
  TG_CHECK(format == tern::PackFormat::two_bit || format == tern::PackFormat::base3,
           "ternary collective: unknown PackFormat ", static_cast<int>(format));
  TG_CHECK(n == 0 || (codes != nullptr && acc != nullptr), "ternary collective on rank ",
           comm.rank(), ": null codes or accumulator for n = ", n);
  TernaryResult result{algorithm, {}};
  if (algorithm == TernaryAlgorithm::automatic) result.algorithm = choose_ternary_algorithm(shape);
  // Every rank knows n, so an empty tensor is skipped by all ranks alike (no zero-byte messages).
  if (n == 0) return result;

  const WireBytes before = comm.wire();
  OptionalDeviceGuard guard(comm.device());
  switch (result.algorithm) {
    case TernaryAlgorithm::ps:
      run_ps(comm, codes, workers, n, format, acc);
      break;
    case TernaryAlgorithm::allgather:
      run_allgather(comm, codes, workers, n, format, acc);
      break;
    case TernaryAlgorithm::packed_allreduce:
      run_packed_allreduce(comm, codes, workers, n, format, acc);
      break;
    case TernaryAlgorithm::automatic:
      break;
  }
  const WireBytes after = comm.wire();
  result.wire = {after.sent - before.sent, after.received - before.received};
  return result;
}

}  // namespace tg::comm
