// aggregate (terngrad/exchange/aggregate.h): the generic allgather path, the exact elementwise
// reduce-scatter path for f32/f16 slots and the exact ternary path for shared-grid codes, picked
// from the compressor's wire layout. Temporaries are tensors from the device's caching allocator.
#include "terngrad/exchange/aggregate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "nn/core/blas.h"
#include "nn/core/clock.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/hash.h"
#include "nn/ops/dispatch.h"
#include "terngrad/baseline_kernels.h"

namespace tg::tern {

namespace {

int64_t padded4(int64_t bytes) {
  return (bytes + 3) / 4 * 4;
}

comm::WireBytes delta(const comm::WireBytes& before, const comm::WireBytes& after) {
  return {after.sent - before.sent, after.received - before.received};
}

void copy_bytes(const Device& d, void* dst, const void* src, int64_t n) {
  if (n == 0) return;
  if (d.is_cpu())
    std::memcpy(dst, src, static_cast<size_t>(n));
  else
    cuda::copy_d2d(d.index, dst, src, static_cast<size_t>(n));
}

// bytes [offset, offset + n) of u8 tensor src into u8 tensor dst at dst_offset (same device).
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t n) {
  if (n == 0) return;
  Tensor d = dst.slice(0, dst_offset, dst_offset + n);
  d.copy_from(src.slice(0, src_offset, src_offset + n));
}

// Round 1, every path: shared = elementwise max over the N workers' metas in global order,
// through an allgather of every rank's W * M floats (with one rank, the local metas themselves).
std::vector<float> share_meta(Compressor& c, comm::Communicator& comm,
                              std::span<const Tensor> local_grads, SlotRange r,
                              AggregateStats& st) {
  const auto m = static_cast<size_t>(c.num_meta(r));
  std::vector<float> shared(m, 0.0f);
  if (m == 0) return shared;
  const size_t w = local_grads.size();
  const size_t n = w * static_cast<size_t>(comm.size());
  auto t0 = Clock::now();
  std::vector<float> metas(w * m);
  for (size_t k = 0; k < w; ++k) c.local_meta(local_grads[k], metas.data() + k * m, r);
  st.encode_s += seconds_since(t0);

  if (comm.size() > 1) {
    t0 = Clock::now();
    const Device d = comm.device();
    const comm::WireBytes before = comm.wire();
    Tensor in = Tensor::from_vector(metas, {static_cast<int64_t>(w * m)}, d);
    Tensor all = Tensor::empty({static_cast<int64_t>(n * m)}, DType::f32, d);
    comm.allgather(in.data<float>(), all.data<float>(), w * m * sizeof(float));
    metas = all.to_vector<float>();
    st.meta_wire = delta(before, comm.wire());
    st.comm_s += seconds_since(t0);
  }

  for (size_t g = 0; g < n; ++g)
    for (size_t i = 0; i < m; ++i)
      shared[i] = g == 0 ? metas[i] : std::max(shared[i], metas[g * m + i]);
  return shared;
}

// ---- the three paths -------------------------------------------------------------------------

void generic_path(Compressor& c, comm::Communicator& comm, std::span<const Tensor> local_grads,
                  int64_t step, SlotRange r, const std::vector<float>& shared, Tensor& out,
                  AggregateStats& st) {
  const Device d = comm.device();
  const int64_t w = static_cast<int64_t>(local_grads.size());
  const int64_t n = w * comm.size();
  const auto b = static_cast<int64_t>(c.payload_bytes(step, r));
  const int64_t first = static_cast<int64_t>(comm.rank()) * w;
  st.routes.assign(r.size(), SlotRoute::message);
  Accumulator acc = c.make_accumulator(d, r);

  if (comm.size() == 1) {
    // Nothing to gather: each message into the sums as soon as it is encoded, in one buffer.
    Tensor msg = Tensor::empty({b}, DType::u8, d);
    for (int64_t k = 0; k < w; ++k) {
      auto t0 = Clock::now();
      c.encode(local_grads[k], shared.data(), step, static_cast<int>(k), msg, r);
      st.encode_s += seconds_since(t0);
      t0 = Clock::now();
      c.accumulate(msg, shared.data(), step, acc, r);
      st.reduce_s += seconds_since(t0);
    }
    const auto t0 = Clock::now();
    c.finalize(acc, shared.data(), step, static_cast<int>(n), out, r);
    st.reduce_s += seconds_since(t0);
    return;
  }

  // Messages travel at a stride of B rounded up to 4 bytes, so every message starts 4-byte
  // aligned (raw floats inside a message are read as floats).
  const int64_t stride = padded4(b);
  auto t0 = Clock::now();
  Tensor local = Tensor::zeros({w * stride}, DType::u8, d);  // zeros: the padding is defined
  for (int64_t k = 0; k < w; ++k) {
    Tensor msg = local.slice(0, k * stride, k * stride + b);
    c.encode(local_grads[k], shared.data(), step, static_cast<int>(first + k), msg, r);
  }
  st.encode_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor all = Tensor::empty({n * stride}, DType::u8, d);
  if (stride > 0)
    comm.allgather(local.data<uint8_t>(), all.data<uint8_t>(), static_cast<size_t>(w * stride));
  st.comm_s += seconds_since(t0);

  t0 = Clock::now();
  for (int64_t g = 0; g < n; ++g) {
    const Tensor msg = all.slice(0, g * stride, g * stride + b);
    c.accumulate(msg, shared.data(), step, acc, r);
  }
  c.finalize(acc, shared.data(), step, static_cast<int>(n), out, r);
  st.reduce_s += seconds_since(t0);
}

// acc[0 .. len) += the `len` values at `in` of the given coding (f32 or f16), in place.
void add_coded(const Device& d, SlotCoding coding, const uint8_t* in, int64_t len, float* acc) {
  if (len == 0) return;
  if (coding == SlotCoding::f32) {
    axpy(d, len, 1.0f, reinterpret_cast<const float*>(in), acc);
    return;
  }
  TG_DISPATCH(d, "fp16_unpack", fp16_unpack_accumulate_cpu(in, len, 1.0f, acc),
              fp16_unpack_accumulate_cuda(in, len, 1.0f, acc));
}

void elementwise_path(Compressor& c, comm::Communicator& comm, std::span<const Tensor> local_grads,
                      int64_t step, SlotRange r, const std::vector<float>& shared,
                      const WireLayout& wl, bool ring, Tensor& out, AggregateStats& st) {
  const Device d = comm.device();
  const int64_t p = comm.size(), me = comm.rank();
  const int64_t w = static_cast<int64_t>(local_grads.size()), workers = w * p;
  const SlotCoding coding = wl.slots.front().coding;
  const int64_t e = coding == SlotCoding::f32 ? 4 : 2;
  const auto [e0, e1] = c.elements(r);
  const int64_t n = e1 - e0;
  const float inv = 1.0f / static_cast<float>(workers);
  TG_CHECK(wl.bytes == n * e, "aggregate: ", c.name(), "'s ", name(coding), " message of ", n,
           " elements is ", wl.bytes, " bytes, expected ", n * e);
  st.elementwise_path = true;
  st.elementwise_bytes = static_cast<int>(e);

  // One worker's message of r as bytes of e per element, in element order (the slots are
  // contiguous in the flat gradient and back to back in the message): f32 slots are the
  // gradient's own floats, read in place; f16 ones are encoded.
  auto t0 = Clock::now();
  std::vector<const uint8_t*> msg(static_cast<size_t>(w));
  Tensor encoded;
  if (coding == SlotCoding::f32) {
    for (int64_t k = 0; k < w; ++k)
      msg[k] = reinterpret_cast<const uint8_t*>(local_grads[k].data<float>() + e0);
  } else {
    const int64_t first = me * w;
    encoded = Tensor::empty({w * n * e}, DType::u8, d);
    for (int64_t k = 0; k < w; ++k) {
      Tensor m = encoded.slice(0, k * n * e, (k + 1) * n * e);
      c.encode(local_grads[k], shared.data(), step, static_cast<int>(first + k), m, r);
      msg[k] = encoded.data<uint8_t>() + k * n * e;
    }
  }
  st.encode_s += seconds_since(t0);

  if (ring && coding == SlotCoding::f32) {
    // The local workers in order, then the ring's sum over ranks, then the average.
    st.routes.assign(r.size(), SlotRoute::ring);
    t0 = Clock::now();
    Tensor acc = Tensor::zeros({n}, DType::f32, d);
    for (int64_t k = 0; k < w; ++k) add_coded(d, coding, msg[k], n, acc.data<float>());
    st.reduce_s += seconds_since(t0);
    t0 = Clock::now();
    comm.allreduce(acc.data<float>(), n, DType::f32, comm::ReduceOp::sum);
    st.comm_s += seconds_since(t0);
    t0 = Clock::now();
    Tensor o = out.slice(0, e0, e1);
    o.zero_();
    axpy(d, n, inv, acc.data<float>(), o.data<float>());
    st.reduce_s += seconds_since(t0);
    return;
  }
  st.routes.assign(r.size(), SlotRoute::reduce_scatter);
  const int64_t range = (n + p - 1) / p;  // elements each rank owns (C)
  auto span_of = [&](int64_t q) { return std::clamp<int64_t>(n - q * range, 0, range); };

  // send[q][k] = local worker k's range q (zero beyond n); recv[r][k] = rank r's worker k's range
  // of this rank: global worker r * W + k.
  t0 = Clock::now();
  const int64_t block = range * e;  // bytes of one worker's range
  // Every byte is written once: the ranges, and zeros only in the short last range's padding
  // (the whole buffer zeroed first cost a full extra pass over the gradient per call).
  Tensor send = Tensor::empty({p * w * block}, DType::u8, d);
  for (int64_t q = 0; q < p; ++q)
    for (int64_t k = 0; k < w; ++k) {
      const int64_t len = span_of(q) * e, at = (q * w + k) * block;
      copy_bytes(d, send.data<uint8_t>() + at, msg[k] + q * block, len);
      if (len < block) send.slice(0, at + len, at + block).zero_();
    }
  st.encode_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor recv = Tensor::empty({p * w * block}, DType::u8, d);
  comm.alltoall(send.data<uint8_t>(), recv.data<uint8_t>(), static_cast<size_t>(w * block));
  st.comm_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor acc = Tensor::zeros({range}, DType::f32, d), mine = Tensor::zeros({range}, DType::f32, d);
  const int64_t len = span_of(me);  // the padding of a short last range stays 0
  for (int64_t g = 0; g < workers; ++g)
    add_coded(d, coding, recv.data<uint8_t>() + g * block, len, acc.data<float>());
  axpy(d, len, inv, acc.data<float>(), mine.data<float>());
  st.reduce_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor all = Tensor::empty({p * range}, DType::f32, d);
  comm.allgather(mine.data<float>(), all.data<float>(), static_cast<size_t>(range) * 4);
  out.slice(0, e0, e1).copy_from(all.slice(0, 0, n));
  st.comm_s += seconds_since(t0);
}

void ternary_path(Compressor& c, comm::Communicator& comm, std::span<const Tensor> local_grads,
                  int64_t step, SlotRange r, const std::vector<float>& shared, const WireLayout& wl,
                  const AggregateOptions& o, WorkerThread* collectives, Tensor& out,
                  AggregateStats& st) {
  const Device d = comm.device();
  const auto& layout = c.layout();
  const int w = static_cast<int>(local_grads.size());
  const int64_t n = static_cast<int64_t>(w) * comm.size();
  const int64_t first = static_cast<int64_t>(comm.rank()) * w;
  const PackFormat f = wl.pack;
  const std::vector<SlotWire>& fmt = wl.slots;  // fmt[t - r.first]: slot t
  const int64_t b = wl.bytes;
  const size_t slots = r.size();
  st.ternary_path = true;
  auto is_ternary = [&](size_t i) { return fmt[i].coding == SlotCoding::ternary; };

  // The bucket: every ternary slot, in layout order; the gathered block: every f32 slot.
  // Every rank derives both, and resolves `automatic`, from the same sizes, so all agree.
  std::vector<int64_t> bucket_numel;
  std::vector<int64_t> block_offset(slots, -1);
  int64_t g_bytes = 0;
  for (size_t i = 0; i < slots; ++i) {
    if (is_ternary(i)) {
      ++st.ternary_slots;
      bucket_numel.push_back(layout[r.first + i].numel);
    } else {
      ++st.raw_slots;
      block_offset[i] = g_bytes;
      g_bytes += fmt[i].bytes;  // numel floats: the block stays 4-byte aligned
    }
  }
  const TernaryPipeline pipeline{o.chunk_bytes, o.overlap ? collectives : nullptr};
  const TernaryBucketShape shape{bucket_numel, comm.size(), w, f, comm.backend(), o.chunk_bytes};
  const TernaryAlgorithm asked = ternary_algorithm(o.algorithm);
  st.bucket_algorithm =
      asked == TernaryAlgorithm::automatic ? choose_ternary_bucket_algorithm(shape) : asked;
  st.bucket_bytes = bucket_code_bytes(bucket_numel, f);
  st.bucket_chunks = st.bucket_bytes == 0 ? 0
                     : o.chunk_bytes == 0 ? 1
                                          : (st.bucket_bytes + o.chunk_bytes - 1) / o.chunk_bytes;
  SlotRoute bucket_route = SlotRoute::allgather;
  if (st.bucket_algorithm == TernaryAlgorithm::ps) bucket_route = SlotRoute::ps;
  if (st.bucket_algorithm == TernaryAlgorithm::packed_allreduce)
    bucket_route = SlotRoute::packed_allreduce;
  st.routes.assign(slots, SlotRoute::gathered);
  for (size_t i = 0; i < slots; ++i)
    if (is_ternary(i)) st.routes[i] = bucket_route;

  // Encode the W messages. With no raw slot a message IS the bucket (slots back to back, each
  // packed_bytes long); otherwise cut the codes and the raw floats apart.
  auto t0 = Clock::now();
  Tensor msgs = Tensor::empty({w * b}, DType::u8, d);
  for (int k = 0; k < w; ++k) {
    Tensor msg = msgs.slice(0, k * b, (k + 1) * b);
    c.encode(local_grads[k], shared.data(), step, static_cast<int>(first + k), msg, r);
  }
  Tensor bucket = msgs;
  Tensor block;
  if (st.raw_slots > 0) {
    bucket = Tensor::empty({w * st.bucket_bytes}, DType::u8, d);
    block = Tensor::empty({w * g_bytes}, DType::u8, d);
    for (int k = 0; k < w; ++k) {
      int64_t at = k * st.bucket_bytes;
      for (size_t i = 0; i < slots; ++i) {
        if (is_ternary(i)) {
          copy_range(bucket, at, msgs, k * b + fmt[i].offset, fmt[i].bytes);
          at += fmt[i].bytes;
        } else {
          copy_range(block, k * g_bytes + block_offset[i], msgs, k * b + fmt[i].offset,
                     fmt[i].bytes);
        }
      }
    }
  }
  st.encode_s += seconds_since(t0);

  Accumulator acc = c.make_accumulator(d, r);

  // The bucket in one collective (per chunk), then the raw block in one allgather.
  t0 = Clock::now();
  std::vector<int32_t*> slot_acc;
  for (size_t i = 0; i < slots; ++i)
    if (is_ternary(i)) slot_acc.push_back(acc.int_at(layout[r.first + i].offset));
  ternary_aggregate_bucket(comm, st.bucket_algorithm, bucket.data<uint8_t>(), w, bucket_numel, f,
                           slot_acc, pipeline);
  Tensor all;
  if (g_bytes > 0) {
    all = Tensor::empty({n * g_bytes}, DType::u8, d);
    comm.allgather(block.data<uint8_t>(), all.data<uint8_t>(), static_cast<size_t>(w * g_bytes));
  }
  st.comm_s += seconds_since(t0);

  // The raw slots in global worker order, summed as TernGradCompressor::accumulate sums them
  // (axpy with alpha 1); then one scaling of every sum.
  t0 = Clock::now();
  for (int64_t g = 0; g < n && g_bytes > 0; ++g) {
    const uint8_t* blk = all.data<uint8_t>() + g * g_bytes;
    for (size_t i = 0; i < slots; ++i) {
      if (block_offset[i] < 0) continue;
      const GradSlot& s = layout[r.first + i];
      axpy(d, s.numel, 1.0f, reinterpret_cast<const float*>(blk + block_offset[i]),
           acc.float_at(s.offset));
    }
  }
  c.finalize(acc, shared.data(), step, static_cast<int>(n), out, r);
  st.reduce_s += seconds_since(t0);
}

}  // namespace

const char* name(SlotRoute r) {
  switch (r) {
    case SlotRoute::message:
      return "message";
    case SlotRoute::reduce_scatter:
      return "reduce-scatter";
    case SlotRoute::ring:
      return "ring";
    case SlotRoute::gathered:
      return "gathered";
    case SlotRoute::ps:
      return "ps";
    case SlotRoute::packed_allreduce:
      return "packed-allreduce";
    case SlotRoute::allgather:
      return "allgather";
  }
  return "?";
}

namespace {

bool any_route(const AggregateStats& b, SlotRoute r) {
  return std::find(b.routes.begin(), b.routes.end(), r) != b.routes.end();
}

}  // namespace

std::string describe(std::span<const AggregateStats> buckets) {
  int64_t slots = 0, ps = 0, par = 0, ag = 0, gathered = 0, ternary_slots = 0, code_bytes = 0,
          chunks = 0, elementwise_bytes = 0;
  bool ternary = false, elementwise = false, ring = false;
  comm::WireBytes wire;
  for (const AggregateStats& b : buckets) {
    slots += static_cast<int64_t>(b.routes.size());
    for (SlotRoute r : b.routes) {
      ps += r == SlotRoute::ps;
      par += r == SlotRoute::packed_allreduce;
      ag += r == SlotRoute::allgather;
      gathered += r == SlotRoute::gathered;
    }
    ternary_slots += b.ternary_slots;
    code_bytes += b.bucket_bytes;
    chunks += b.bucket_chunks;
    ternary = ternary || b.ternary_path;
    if (b.elementwise_path) {
      elementwise = true;
      elementwise_bytes = b.elementwise_bytes;
      ring = ring || any_route(b, SlotRoute::ring);
    }
    wire.sent += b.wire.sent;
    wire.received += b.wire.received;
  }
  std::string line;
  if (ternary)
    line =
        tg::detail::concat("ternary: ", ps, " ps, ", par, " packed-allreduce, ", ag, " allgather, ",
                           gathered, " gathered raw fp32; bucket of ", ternary_slots, " slots, ",
                           code_bytes, " B per worker, ", chunks, " chunk", chunks == 1 ? "" : "s");
  else if (elementwise)
    line = ring ? tg::detail::concat("f32 ring allreduce of ", slots, " slots")
                : tg::detail::concat(elementwise_bytes == 4 ? "f32" : "f16",
                                     " reduce-scatter + allgather of ", slots,
                                     " slots, summed in worker order");
  else
    line = tg::detail::concat("generic allgather of ", slots, " slots");
  return tg::detail::concat(line, "; wire sent ", wire.sent, " B received ", wire.received, " B");
}

namespace {

// The comm.algorithm each ternary bucket algorithm answers to (ring and automatic: automatic).
constexpr std::pair<Algorithm, TernaryAlgorithm> kTernaryOf[] = {
    {Algorithm::ps, TernaryAlgorithm::ps},
    {Algorithm::allgather, TernaryAlgorithm::allgather},
    {Algorithm::packed_allreduce, TernaryAlgorithm::packed_allreduce}};

}  // namespace

TernaryAlgorithm ternary_algorithm(Algorithm a) {
  for (const auto& [algorithm, ternary] : kTernaryOf)
    if (algorithm == a) return ternary;
  return TernaryAlgorithm::automatic;
}

Algorithm exchange_algorithm(TernaryAlgorithm a) {
  for (const auto& [algorithm, ternary] : kTernaryOf)
    if (ternary == a) return algorithm;
  return Algorithm::automatic;
}

AggregateStats aggregate(Compressor& c, comm::Communicator& comm,
                         std::span<const Tensor> local_grads, int64_t step, Tensor& out,
                         const AggregateOptions& options, SlotRange r, WorkerThread* collectives) {
  const Device d = comm.device();
  TG_CHECK(!local_grads.empty(), "aggregate on rank ", comm.rank(),
           ": no local worker gradients (expected W >= 1)");
  TG_CHECK(static_cast<int64_t>(local_grads.size()) * comm.size() <= (int64_t{1} << 30),
           "aggregate: N = ", comm.size(), " x ", local_grads.size(),
           " workers (expected at most 2^30)");
  for (size_t k = 0; k < local_grads.size(); ++k) {
    const Tensor& g = local_grads[k];
    check_tensor(g, "aggregate: local gradient", DType::f32, d);
    TG_CHECK(g.is_contiguous() && g.numel() == c.total(), "aggregate: local gradient ", k,
             " must be a contiguous f32 [", c.total(), "] on ", d.str(), ", got ", g.str());
  }
  check_tensor(out, "aggregate: out", DType::f32, d);
  TG_CHECK(out.is_contiguous() && out.numel() == c.total(),
           "aggregate: out must be a contiguous f32 [", c.total(), "] on ", d.str(), ", got ",
           out.str());
  TG_CHECK(options.chunk_bytes >= 0,
           "aggregate: AggregateOptions.chunk_bytes = ", options.chunk_bytes,
           " (expected >= 0; 0 = one call for the whole bucket)");
  if (r.size() == 0) r = c.all_slots();

  // The route, from the compressor's description of the range's message. One rank exchanges
  // nothing: the generic path then folds the messages as they are encoded, the cheapest route.
  const WireLayout wl = c.wire(step, r);
  const bool group = comm.size() > 1;
  const bool ternary = group && options.algorithm != Algorithm::allgather &&
                       wl.any(SlotCoding::ternary) &&
                       std::all_of(wl.slots.begin(), wl.slots.end(), [](const SlotWire& s) {
                         return s.coding == SlotCoding::ternary || s.coding == SlotCoding::f32;
                       });
  const bool elementwise =
      group && !wl.slots.empty() && (wl.uniform(SlotCoding::f32) || wl.uniform(SlotCoding::f16));

  // What this call is about, for backends that check peers agree
  // (comm::Communicator::set_call_context).
  uint64_t digest = kFnvOffset;
  for (const int64_t v : {step, static_cast<int64_t>(r.first), static_cast<int64_t>(r.size()),
                          wl.bytes, static_cast<int64_t>(local_grads.size())})
    digest = fnv1a64(std::string_view(reinterpret_cast<const char*>(&v), sizeof v), digest);
  comm.set_call_context(fnv1a64(c.name(), digest));

  AggregateStats st;
  const comm::WireBytes before = comm.wire();
  const std::vector<float> shared = share_meta(c, comm, local_grads, r, st);
  if (ternary)
    ternary_path(c, comm, local_grads, step, r, shared, wl, options, collectives, out, st);
  else if (elementwise)
    elementwise_path(c, comm, local_grads, step, r, shared, wl,
                     options.algorithm == Algorithm::ring, out, st);
  else
    generic_path(c, comm, local_grads, step, r, shared, out, st);
  st.wire = delta(before, comm.wire());
  st.shared_meta = shared;
  comm.set_call_context(0);
  return st;
}

AggregateStats aggregate_local(Compressor& c, std::span<const Tensor> worker_grads, int64_t step,
                               Tensor& out, SlotRange r) {
  TG_CHECK(!worker_grads.empty(), "aggregate_local: no worker gradients");
  const std::unique_ptr<comm::Communicator> self =
      comm::make_self_communicator(worker_grads[0].device());
  return aggregate(c, *self, worker_grads, step, out, {}, r);
}

}  // namespace tg::tern
