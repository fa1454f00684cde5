// aggregate_distributed (comm/aggregate.h): the generic allgather path for every compressor, the
// exact fp32 reduce-scatter path for raw fp32, and the exact ternary path for terngrad with
// shared scalers. One explicit device switch per kernel
// call; temporaries are tensors from the device's caching allocator.
#include "comm/aggregate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "nn/core/blas.h"
#include "nn/core/error.h"
#include "nn/ops/dispatch.h"

namespace tg::comm {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t padded4(int64_t bytes) {
  return (bytes + 3) / 4 * 4;
}

WireBytes delta(const WireBytes& before, const WireBytes& after) {
  return {after.sent - before.sent, after.received - before.received};
}

// bytes [offset, offset + n) of u8 tensor src into u8 tensor dst at dst_offset (same device).
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t n) {
  if (n == 0) return;
  Tensor d = dst.slice(0, dst_offset, dst_offset + n);
  d.copy_from(src.slice(0, src_offset, src_offset + n));
}

// Round 1, both paths: shared = elementwise max over the N workers' metas in global order (the
// fold of aggregate_emulated), through an allgather of every rank's W * M floats.
std::vector<float> share_meta(tern::Compressor& c, Communicator& comm,
                              std::span<const Tensor> local_grads, AggregateStats& st) {
  const auto m = static_cast<size_t>(c.num_meta());
  std::vector<float> shared(m, 0.0f);
  if (m == 0) return shared;
  const size_t w = local_grads.size();
  const size_t n = w * static_cast<size_t>(comm.size());
  auto t0 = Clock::now();
  std::vector<float> local(w * m);
  for (size_t k = 0; k < w; ++k) c.local_meta(local_grads[k], local.data() + k * m);
  st.encode_s += seconds_since(t0);

  t0 = Clock::now();
  const Device d = comm.device();
  const WireBytes before = comm.wire();
  Tensor in = Tensor::from_vector(local, {static_cast<int64_t>(w * m)}, d);
  Tensor all = Tensor::empty({static_cast<int64_t>(n * m)}, DType::f32, d);
  comm.allgather(in.data<float>(), all.data<float>(), w * m * sizeof(float));
  const std::vector<float> metas = all.to_vector<float>();
  st.meta_wire = delta(before, comm.wire());
  st.comm_s += seconds_since(t0);

  for (size_t g = 0; g < n; ++g)
    for (size_t i = 0; i < m; ++i)
      shared[i] = g == 0 ? metas[i] : std::max(shared[i], metas[g * m + i]);
  return shared;
}

// ---- the message layout of terngrad with shared scalers (terngrad/compressor.h) --------------

struct SlotFormat {
  bool ternary = false;
  int64_t offset = 0;  // byte offset inside one worker's message
  int64_t bytes = 0;
};

// TernGradCompressor's own rules (terngrad/compressor.h: ternarized_slots, floating_grad_step)
// decide which slots are ternary at `step`; a ternary slot is packed_bytes(pack, numel) bytes of
// codes (shared scalers: no scaler in the message), any other numel raw floats.
std::vector<SlotFormat> terngrad_message_layout(const tern::Compressor& c,
                                                const tern::CompressionOptions& o, int64_t step) {
  const auto& layout = c.layout();
  const bool floating = tern::floating_grad_step(o, step);
  const std::vector<bool> ternary = tern::ternarized_slots(layout, o);
  std::vector<SlotFormat> out(layout.size());
  int64_t offset = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    const int64_t numel = layout[t].numel;
    SlotFormat& s = out[t];
    s.ternary = !floating && ternary[t];
    s.offset = offset;
    s.bytes = s.ternary ? static_cast<int64_t>(tern::packed_bytes(o.pack, numel))
                        : numel * static_cast<int64_t>(sizeof(float));
    offset += s.bytes;
  }
  TG_CHECK(static_cast<size_t>(offset) == c.payload_bytes(step),
           "aggregate_distributed: AggregateOptions.compression does not describe the terngrad "
           "compressor (its messages at step ",
           step, " are ", c.payload_bytes(step), " bytes, the options give ", offset,
           "): pass the CompressionOptions it was made with");
  return out;
}

// ---- the two paths ---------------------------------------------------------------------------

void generic_path(tern::Compressor& c, Communicator& comm, std::span<const Tensor> local_grads,
                  int64_t step, const std::vector<float>& shared, Tensor& out, AggregateStats& st) {
  const Device d = comm.device();
  const int64_t w = static_cast<int64_t>(local_grads.size());
  const int64_t n = w * comm.size();
  const auto b = static_cast<int64_t>(c.payload_bytes(step));
  // Messages travel at a stride of B rounded up to 4 bytes, so every message starts as aligned
  // as aggregate_emulated's (raw floats inside a message are read as floats).
  const int64_t stride = padded4(b);
  const int64_t first = static_cast<int64_t>(comm.rank()) * w;
  st.routes.assign(c.layout().size(), SlotRoute::message);

  auto t0 = Clock::now();
  Tensor local = Tensor::zeros({w * stride}, DType::u8, d);  // zeros: the padding is defined
  for (int64_t k = 0; k < w; ++k) {
    Tensor msg = local.slice(0, k * stride, k * stride + b);
    c.encode(local_grads[k], shared.data(), step, static_cast<int>(first + k), msg);
  }
  st.encode_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor all = Tensor::empty({n * stride}, DType::u8, d);
  if (stride > 0)
    comm.allgather(local.data<uint8_t>(), all.data<uint8_t>(), static_cast<size_t>(w * stride));
  st.comm_s += seconds_since(t0);

  t0 = Clock::now();
  tern::Accumulator acc = c.make_accumulator(d);
  for (int64_t g = 0; g < n; ++g) {
    const Tensor msg = all.slice(0, g * stride, g * stride + b);
    c.accumulate(msg, shared.data(), step, acc);
  }
  c.finalize(acc, shared.data(), step, static_cast<int>(n), out);
  st.reduce_s += seconds_since(t0);
}

void fp32_path(tern::Compressor& c, Communicator& comm, std::span<const Tensor> local_grads,
               Tensor& out, AggregateStats& st) {
  const Device d = comm.device();
  const int64_t p = comm.size(), me = comm.rank();
  const int64_t w = static_cast<int64_t>(local_grads.size()), workers = w * p;
  const int64_t n = c.total(), range = (n + p - 1) / p;  // elements each rank owns (C)
  st.fp32_path = true;
  st.routes.assign(c.layout().size(), SlotRoute::reduce_scatter);
  auto span_of = [&](int64_t q) { return std::clamp<int64_t>(n - q * range, 0, range); };

  // send[q][k] = local worker k's range q (zero beyond n); recv[r][k] = rank r's worker k's range
  // of this rank: global worker r * W + k.
  auto t0 = Clock::now();
  Tensor send = Tensor::zeros({p * w * range}, DType::f32, d);
  for (int64_t q = 0; q < p; ++q)
    for (int64_t k = 0; k < w; ++k) {
      const int64_t len = span_of(q);
      if (len == 0) continue;
      const int64_t at = (q * w + k) * range;
      send.slice(0, at, at + len).copy_from(local_grads[k].slice(0, q * range, q * range + len));
    }
  st.encode_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor recv = Tensor::empty({p * w * range}, DType::f32, d);
  comm.alltoall(send.data<float>(), recv.data<float>(), static_cast<size_t>(w * range) * 4);
  st.comm_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor acc = Tensor::zeros({range}, DType::f32, d), mine = Tensor::zeros({range}, DType::f32, d);
  const int64_t len = span_of(me);  // the padding of a short last range stays 0
  for (int64_t g = 0; g < workers; ++g)
    axpy(d, len, 1.0f, recv.data<float>() + g * range, acc.data<float>());
  axpy(d, len, 1.0f / static_cast<float>(workers), acc.data<float>(), mine.data<float>());
  st.reduce_s += seconds_since(t0);

  t0 = Clock::now();
  Tensor all = Tensor::empty({p * range}, DType::f32, d);
  comm.allgather(mine.data<float>(), all.data<float>(), static_cast<size_t>(range) * 4);
  out.copy_from(all.slice(0, 0, n));
  st.comm_s += seconds_since(t0);
}

void ternary_path(tern::Compressor& c, Communicator& comm, std::span<const Tensor> local_grads,
                  int64_t step, const std::vector<float>& shared, const AggregateOptions& o,
                  Tensor& out, AggregateStats& st) {
  const Device d = comm.device();
  const auto& layout = c.layout();
  const int w = static_cast<int>(local_grads.size());
  const int64_t n = static_cast<int64_t>(w) * comm.size();
  const int64_t first = static_cast<int64_t>(comm.rank()) * w;
  const tern::PackFormat f = o.compression.pack;
  const std::vector<SlotFormat> fmt = terngrad_message_layout(c, o.compression, step);
  const auto b = static_cast<int64_t>(c.payload_bytes(step));
  TG_CHECK(o.chunk_bytes >= 0,
           "aggregate_distributed: AggregateOptions.chunk_bytes = ", o.chunk_bytes,
           " (expected >= 0; 0 = one call for the whole bucket)");
  st.ternary_path = true;

  // The bucket: every ternary slot, in layout order; the gathered block: every raw fp32 slot.
  // Every rank derives both, and resolves `automatic`, from the same sizes, so all agree.
  std::vector<int64_t> bucket_numel;
  std::vector<int64_t> block_offset(layout.size(), -1);
  int64_t g_bytes = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    if (fmt[t].ternary) {
      ++st.ternary_slots;
      bucket_numel.push_back(layout[t].numel);
    } else {
      ++st.raw_slots;
      block_offset[t] = g_bytes;
      g_bytes += fmt[t].bytes;  // numel floats: the block stays 4-byte aligned
    }
  }
  const TernaryPipeline pipeline{o.chunk_bytes, o.overlap};
  const TernaryBucketShape shape{bucket_numel, comm.size(), w, f, comm.backend(), o.chunk_bytes};
  st.bucket_algorithm = o.algorithm == TernaryAlgorithm::automatic
                            ? choose_ternary_bucket_algorithm(shape)
                            : o.algorithm;
  st.bucket_bytes = bucket_code_bytes(bucket_numel, f);
  st.bucket_chunks = st.bucket_bytes == 0 ? 0
                     : o.chunk_bytes == 0 ? 1
                                          : (st.bucket_bytes + o.chunk_bytes - 1) / o.chunk_bytes;
  SlotRoute bucket_route = SlotRoute::allgather;
  if (st.bucket_algorithm == TernaryAlgorithm::ps) bucket_route = SlotRoute::ps;
  if (st.bucket_algorithm == TernaryAlgorithm::packed_allreduce)
    bucket_route = SlotRoute::packed_allreduce;
  st.routes.assign(layout.size(), SlotRoute::gathered);
  for (size_t t = 0; t < layout.size(); ++t)
    if (fmt[t].ternary) st.routes[t] = bucket_route;

  // Encode the W messages. With no raw slot a message IS the bucket (slots back to back, each
  // packed_bytes long); otherwise cut the codes and the raw floats apart.
  auto t0 = Clock::now();
  Tensor msgs = Tensor::empty({w * b}, DType::u8, d);
  for (int k = 0; k < w; ++k) {
    Tensor msg = msgs.slice(0, k * b, (k + 1) * b);
    c.encode(local_grads[k], shared.data(), step, static_cast<int>(first + k), msg);
  }
  Tensor bucket = msgs;
  Tensor block;
  if (st.raw_slots > 0) {
    bucket = Tensor::empty({w * st.bucket_bytes}, DType::u8, d);
    block = Tensor::empty({w * g_bytes}, DType::u8, d);
    for (int k = 0; k < w; ++k) {
      int64_t at = k * st.bucket_bytes;
      for (size_t t = 0; t < layout.size(); ++t) {
        if (fmt[t].ternary) {
          copy_range(bucket, at, msgs, k * b + fmt[t].offset, fmt[t].bytes);
          at += fmt[t].bytes;
        } else {
          copy_range(block, k * g_bytes + block_offset[t], msgs, k * b + fmt[t].offset,
                     fmt[t].bytes);
        }
      }
    }
  }
  st.encode_s += seconds_since(t0);

  tern::Accumulator acc = c.make_accumulator(d);
  int32_t* ints = acc.ints.data<int32_t>();
  float* floats = acc.floats.data<float>();

  // The bucket in one collective (per chunk), then the raw block in one allgather.
  t0 = Clock::now();
  std::vector<int32_t*> slot_acc;
  for (size_t t = 0; t < layout.size(); ++t)
    if (fmt[t].ternary) slot_acc.push_back(ints + layout[t].offset);
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
    for (size_t t = 0; t < layout.size(); ++t) {
      if (block_offset[t] < 0) continue;
      const tern::GradSlot& s = layout[t];
      axpy(d, s.numel, 1.0f, reinterpret_cast<const float*>(blk + block_offset[t]),
           floats + s.offset);
    }
  }
  c.finalize(acc, shared.data(), step, static_cast<int>(n), out);
  st.reduce_s += seconds_since(t0);
}

}  // namespace

const char* name(SlotRoute r) {
  switch (r) {
    case SlotRoute::message:
      return "message";
    case SlotRoute::reduce_scatter:
      return "reduce-scatter";
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

std::string describe(const AggregateStats& s) {
  std::string line;
  if (s.ternary_path) {
    int64_t ps = 0, par = 0, ag = 0, gathered = 0;
    for (SlotRoute r : s.routes) {
      ps += r == SlotRoute::ps;
      par += r == SlotRoute::packed_allreduce;
      ag += r == SlotRoute::allgather;
      gathered += r == SlotRoute::gathered;
    }
    line = detail::concat("ternary: ", ps, " ps, ", par, " packed-allreduce, ", ag, " allgather, ",
                          gathered, " gathered raw fp32; bucket of ", s.ternary_slots, " slots, ",
                          s.bucket_bytes, " B per worker, ", s.bucket_chunks, " chunk",
                          s.bucket_chunks == 1 ? "" : "s");
  } else if (s.fp32_path) {
    line = detail::concat("fp32 reduce-scatter + allgather of ", s.routes.size(),
                          " slots, summed in worker order");
  } else {
    line = detail::concat("generic allgather of ", s.routes.size(), " slots");
  }
  return detail::concat(line, "; wire sent ", s.wire.sent, " B received ", s.wire.received, " B");
}

AggregateStats aggregate_distributed(tern::Compressor& c, Communicator& comm,
                                     std::span<const Tensor> local_grads, int64_t step, Tensor& out,
                                     const AggregateOptions& options) {
  const Device d = comm.device();
  TG_CHECK(!local_grads.empty(), "aggregate_distributed on rank ", comm.rank(),
           ": no local worker gradients (expected W >= 1)");
  TG_CHECK(static_cast<int64_t>(local_grads.size()) * comm.size() <= (int64_t{1} << 30),
           "aggregate_distributed: N = ", comm.size(), " x ", local_grads.size(),
           " workers (expected at most 2^30)");
  for (size_t k = 0; k < local_grads.size(); ++k) {
    const Tensor& g = local_grads[k];
    check_tensor(g, "aggregate_distributed: local gradient", DType::f32, d);
    TG_CHECK(g.is_contiguous() && g.numel() == c.total(), "aggregate_distributed: local gradient ",
             k, " must be a contiguous f32 [", c.total(), "] on ", d.str(), ", got ", g.str());
  }
  check_tensor(out, "aggregate_distributed: out", DType::f32, d);
  TG_CHECK(out.is_contiguous() && out.numel() == c.total(),
           "aggregate_distributed: out must be a "
           "contiguous f32 [",
           c.total(), "] on ", d.str(), ", got ", out.str());

  const bool ternary = c.name() == "terngrad" && c.num_meta() > 0 &&
                       options.algorithm != TernaryAlgorithm::allgather;
  if (ternary)
    TG_CHECK(
        options.compression.method == "terngrad" && options.compression.scaler_sharing == "max",
        "aggregate_distributed: the ", name(options.algorithm),
        " algorithm needs AggregateOptions.compression = the options of the terngrad "
        "compressor (method 'terngrad', scaler_sharing 'max'), got method '",
        options.compression.method, "', scaler_sharing '", options.compression.scaler_sharing, "'");

  AggregateStats st;
  const WireBytes before = comm.wire();
  const std::vector<float> shared = share_meta(c, comm, local_grads, st);
  if (ternary)
    ternary_path(c, comm, local_grads, step, shared, options, out, st);
  else if (c.elementwise_fp32() && comm.size() > 1)
    fp32_path(c, comm, local_grads, out, st);
  else
    generic_path(c, comm, local_grads, step, shared, out, st);
  st.wire = delta(before, comm.wire());
  return st;
}

}  // namespace tg::comm
