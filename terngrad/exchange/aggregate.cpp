// aggregate (terngrad/exchange/aggregate.h): the generic allgather path, the exact elementwise
// reduce-scatter path for f32/f16 slots and the exact ternary path for shared-grid codes, picked
// from the compressor's wire layout. Temporaries are tensors from the device's caching allocator.
#include "terngrad/exchange/aggregate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
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

}  // namespace

bool gathers_values(int64_t p, int64_t w, int64_t e, int64_t n) {
  const int64_t range = (n + p - 1) / p;
  return p > 1 && (p - 1) * w * e * n <= (p - 1) * (w * e + 4) * range;
}

int64_t node_fold_lanes(const comm::NodeLayout& nodes, int64_t p, int64_t w, int64_t e, int64_t n) {
  const int64_t m = nodes.nodes();
  if (m < 2 || nodes.ranks() != p || p % m != 0) return 0;
  const int64_t g = p / m;
  if (g < 2 || nodes != comm::NodeLayout::blocks(static_cast<int>(p), static_cast<int>(g)))
    return 0;
  const int64_t c = (n + p - 1) / p, lane = (n + g - 1) / g;
  // Bytes out of the busiest node: the flat reduce-scatter + allgather sends every rank's range
  // to each rank of the other nodes and the averages back; the fold sends G lanes of partial
  // sums to the next node, and the last node the averages to every other node.
  const int64_t flat = g * (p - g) * (w * e + 4) * c;
  const int64_t fold = (m - 1) * g * 4 * lane;
  return fold < flat ? g : 0;
}

int64_t fold_pieces(int64_t lane, int64_t e, int64_t n, int64_t chunk_bytes) {
  if (chunk_bytes <= 0) return 1;
  return std::clamp<int64_t>((n * e + chunk_bytes - 1) / chunk_bytes, 1,
                             std::max<int64_t>(lane, 1));
}

std::vector<Message> elementwise_messages(const comm::NodeLayout& nodes, int64_t p, int64_t w,
                                          int64_t e, int64_t n, int64_t chunk_bytes) {
  std::vector<Message> out;
  auto add = [&](int64_t src, int64_t dst, int64_t bytes, int phase) {
    if (bytes > 0 && src != dst)
      out.push_back({static_cast<int>(src), static_cast<int>(dst), bytes, phase});
  };
  if (p <= 1 || n == 0) return out;
  if (const int64_t g = node_fold_lanes(nodes, p, w, e, n); g > 0) {
    // node_fold_path's rounds: 1. lanes inside the node; 2, 3. round t: node h sends piece t - h
    // of its partial sums to node h + 1, the last node piece t - (M - 1) of the averages to
    // every other node; 4. the lanes' averages inside the node.
    const int64_t m = p / g, lane = (n + g - 1) / g;
    const int64_t pieces = fold_pieces(lane, e, n, chunk_bytes);
    const int64_t piece = (lane + pieces - 1) / pieces;
    auto bytes_of = [&](int64_t c) {
      return (std::min((c + 1) * piece, lane) - std::min(c * piece, lane)) * 4;
    };
    for (int64_t r = 0; r < p; ++r)
      for (int64_t q = 0; q < g; ++q) add(r, r / g * g + q, w * lane * e, 0);
    for (int64_t t = 0; t + 1 < pieces + m; ++t)
      for (int64_t r = 0; r < p; ++r) {
        const int64_t node = r / g, l = r % g;
        if (const int64_t c = t - node; node + 1 < m && c >= 0 && c < pieces)
          add(r, (node + 1) * g + l, bytes_of(c), static_cast<int>(1 + t));
        if (const int64_t c = t - (m - 1); node == m - 1 && c >= 0 && c < pieces)
          for (int64_t k = 0; k + 1 < m; ++k)
            add(r, k * g + l, bytes_of(c), static_cast<int>(1 + t));
      }
    const int last = static_cast<int>(pieces + m);
    for (int64_t r = 0; r < p; ++r)
      for (int64_t q = 0; q < g; ++q) add(r, r / g * g + q, 4 * lane, last);
    return out;
  }
  if (gathers_values(p, w, e, n)) {
    for (int64_t r = 0; r < p; ++r)
      for (int64_t q = 0; q < p; ++q) add(r, q, w * e * n, 0);
    return out;
  }
  const int64_t range = (n + p - 1) / p;
  for (int64_t r = 0; r < p; ++r)
    for (int64_t q = 0; q < p; ++q) add(r, q, w * e * range, 0);
  for (int64_t r = 0; r < p; ++r)
    for (int64_t q = 0; q < p; ++q) add(r, q, 4 * range, 1);
  return out;
}

namespace {

comm::WireBytes delta(const comm::WireBytes& before, const comm::WireBytes& after) {
  return {after.sent - before.sent, after.received - before.received};
}

// The part of a collective's bytes `w` that crosses node boundaries, for the collectives that move
// one equal block between every pair of ranks (allgather and alltoall: a direct exchange on
// Gloo, comm/gloo_comm.h; the same per-rank totals in comm/wire_model.h): the blocks to and from
// the peers on other nodes. Zero without a layout of two or more nodes.
comm::WireBytes across_nodes(const comm::WireBytes& w, const comm::NodeLayout& nodes, int rank) {
  if (nodes.nodes() < 2) return {};
  const int p = nodes.ranks();
  int off = 0;
  for (int q = 0; q < p; ++q)
    off += nodes.node_of[static_cast<size_t>(q)] != nodes.node_of[static_cast<size_t>(rank)];
  const auto peers = static_cast<uint64_t>(p - 1), o = static_cast<uint64_t>(off);
  return {w.sent / peers * o, w.received / peers * o};
}

// bytes [offset, offset + n) of u8 tensor src into u8 tensor dst at dst_offset (same device).
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t n) {
  if (n == 0) return;
  Tensor d = dst.slice(0, dst_offset, dst_offset + n);
  d.copy_from(src.slice(0, src_offset, src_offset + n));
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

// out[0 .. len) = 0 + inv * (0 + m_0 + m_1 + ... + m_{N-1}), elementwise, where m_g is the `len`
// values of the coding at msgs[g]: the exact fold of the elementwise path (see
// aggregate.h), in that order. On the CPU with f32 values in one pass over the messages, in tiles
// that stay in L1, instead of a zeroed accumulator, one axpy per message and a zeroed out (six
// passes over memory at P = 2: 2.3 ms of LeNet's 5 MB, measured on the 1 Gbit/s link's critical
// path); the same operations per element in the same order, so the same bits.
void average_in_order(const Device& d, SlotCoding coding, std::span<const uint8_t* const> msgs,
                      int64_t len, float inv, Tensor out) {
  if (len == 0) return;
  if (d.is_cpu() && coding == SlotCoding::f32) {
    float* o = out.data<float>();
    constexpr int64_t kTile = 1024;
    float acc[kTile];
    for (int64_t i0 = 0; i0 < len; i0 += kTile) {
      const int64_t m = std::min(kTile, len - i0);
      for (int64_t j = 0; j < m; ++j) acc[j] = 0.0f;
      for (const uint8_t* mg : msgs) {
        const auto* x = reinterpret_cast<const float*>(mg) + i0;
        for (int64_t j = 0; j < m; ++j) acc[j] += x[j];
      }
      for (int64_t j = 0; j < m; ++j) o[i0 + j] = 0.0f + inv * acc[j];
    }
    return;
  }
  Tensor acc = Tensor::zeros({len}, DType::f32, d);
  for (const uint8_t* mg : msgs) add_coded(d, coding, mg, len, acc.data<float>());
  out.zero_();
  axpy(d, len, inv, acc.data<float>(), out.data<float>());
}

// acc[0 .. len) += each message of msgs in order (values of the coding), in place: the middle of
// the fold above, for a fold that continues on another rank.
void fold_in_order(const Device& d, SlotCoding coding, std::span<const uint8_t* const> msgs,
                   int64_t len, float* acc) {
  if (len == 0) return;
  if (d.is_cpu() && coding == SlotCoding::f32) {
    for (const uint8_t* mg : msgs) {
      const auto* x = reinterpret_cast<const float*>(mg);
      for (int64_t j = 0; j < len; ++j) acc[j] += x[j];
    }
    return;
  }
  for (const uint8_t* mg : msgs) add_coded(d, coding, mg, len, acc);
}

// One call of aggregate(): one slot range of one step on this rank. The rounds and paths of the
// header comment are its methods; what they share (the compressor, the communicator, the
// gradients, the range, its wire layout and shared meta, the statistics) are its members.
class BucketExchange {
 public:
  BucketExchange(Compressor& c, comm::Communicator& comm, std::span<const Tensor> local_grads,
                 int64_t step, Tensor& out, const AggregateOptions& o, SlotRange r,
                 WorkerThread* collectives)
      : c_(c),
        comm_(comm),
        d_(comm.device()),
        grads_(local_grads),
        step_(step),
        out_(out),
        o_(o),
        r_(r),
        collectives_(collectives),
        w_(static_cast<int64_t>(local_grads.size())),
        n_(w_ * comm.size()),
        first_(static_cast<int64_t>(comm.rank()) * w_),
        wl_(c.wire(step, r)) {}

  AggregateStats run() {
    // The route, from the compressor's description of the range's message. One rank exchanges
    // nothing: the generic path then folds the messages as they are encoded, the cheapest route.
    const bool group = comm_.size() > 1;
    const bool ternary = group && o_.algorithm != Route::allgather &&
                         wl_.any(SlotCoding::ternary) &&
                         std::all_of(wl_.slots.begin(), wl_.slots.end(), [](const SlotWire& s) {
                           return s.coding == SlotCoding::ternary || s.coding == SlotCoding::f32;
                         });
    const bool elementwise = group && !wl_.slots.empty() &&
                             (wl_.uniform(SlotCoding::f32) || wl_.uniform(SlotCoding::f16));

    // What this call is about, for backends that check peers agree
    // (comm::Communicator::set_call_context).
    uint64_t digest = kFnvOffset;
    for (const int64_t v :
         {step_, static_cast<int64_t>(r_.first), static_cast<int64_t>(r_.size()), wl_.bytes, w_})
      digest = fnv1a64(std::string_view(reinterpret_cast<const char*>(&v), sizeof v), digest);
    comm_.set_call_context(fnv1a64(c_.name(), digest));

    const comm::WireBytes before = comm_.wire();
    share_meta();
    if (ternary)
      ternary_path();
    else if (elementwise)
      elementwise_path(o_.algorithm == Route::ring);
    else
      generic_path();
    st_.wire = delta(before, comm_.wire());
    st_.shared_meta = shared_;
    comm_.set_call_context(0);
    return std::move(st_);
  }

 private:
  // Round 1, every path: shared = elementwise max over the N workers' metas in global order,
  // through an allgather of every rank's W * M floats (with one rank, the local metas themselves).
  void share_meta() {
    const auto m = static_cast<size_t>(c_.num_meta(r_));
    shared_.assign(m, 0.0f);
    if (m == 0) return;
    const auto w = static_cast<size_t>(w_), n = static_cast<size_t>(n_);
    auto t0 = Clock::now();
    std::vector<float> metas(w * m);
    for (size_t k = 0; k < w; ++k) c_.local_meta(grads_[k], metas.data() + k * m, r_);
    st_.encode_s += seconds_since(t0);

    if (comm_.size() > 1) {
      t0 = Clock::now();
      const comm::WireBytes before = comm_.wire();
      Tensor in = Tensor::from_vector(metas, {static_cast<int64_t>(w * m)}, d_);
      Tensor all = Tensor::empty({static_cast<int64_t>(n * m)}, DType::f32, d_);
      comm_.allgather(in.data<float>(), all.data<float>(), w * m * sizeof(float));
      metas = all.to_vector<float>();
      st_.meta_wire = delta(before, comm_.wire());
      add_inter(across_nodes(st_.meta_wire, o_.nodes, comm_.rank()));
      st_.comm_s += seconds_since(t0);
    }

    for (size_t g = 0; g < n; ++g)
      for (size_t i = 0; i < m; ++i)
        shared_[i] = g == 0 ? metas[i] : std::max(shared_[i], metas[g * m + i]);
  }

  void generic_path() {
    const auto b = static_cast<int64_t>(c_.payload_bytes(step_, r_));
    st_.routes.assign(r_.size(), Route::message);
    Accumulator acc = c_.make_accumulator(d_, r_);

    if (comm_.size() == 1) {
      // Nothing to gather: each message into the sums as soon as it is encoded, in one buffer.
      Tensor msg = Tensor::empty({b}, DType::u8, d_);
      for (int64_t k = 0; k < w_; ++k) {
        auto t0 = Clock::now();
        c_.encode(grads_[k], shared_.data(), step_, static_cast<int>(k), msg, r_);
        st_.encode_s += seconds_since(t0);
        t0 = Clock::now();
        c_.accumulate(msg, shared_.data(), step_, acc, r_);
        st_.reduce_s += seconds_since(t0);
      }
      const auto t0 = Clock::now();
      c_.finalize(acc, shared_.data(), step_, static_cast<int>(n_), out_, r_);
      st_.reduce_s += seconds_since(t0);
      return;
    }

    // Messages travel at a stride of B rounded up to 4 bytes, so every message starts 4-byte
    // aligned (raw floats inside a message are read as floats).
    const int64_t stride = padded4(b);
    auto t0 = Clock::now();
    Tensor local = Tensor::zeros({w_ * stride}, DType::u8, d_);  // zeros: the padding is defined
    for (int64_t k = 0; k < w_; ++k) {
      Tensor msg = local.slice(0, k * stride, k * stride + b);
      c_.encode(grads_[k], shared_.data(), step_, static_cast<int>(first_ + k), msg, r_);
    }
    st_.encode_s += seconds_since(t0);

    t0 = Clock::now();
    Tensor all = Tensor::empty({n_ * stride}, DType::u8, d_);
    if (stride > 0)
      uniform_collective([&] {
        comm_.allgather(local.data<uint8_t>(), all.data<uint8_t>(),
                        static_cast<size_t>(w_ * stride));
      });
    st_.comm_s += seconds_since(t0);

    t0 = Clock::now();
    for (int64_t g = 0; g < n_; ++g) {
      const Tensor msg = all.slice(0, g * stride, g * stride + b);
      c_.accumulate(msg, shared_.data(), step_, acc, r_);
    }
    c_.finalize(acc, shared_.data(), step_, static_cast<int>(n_), out_, r_);
    st_.reduce_s += seconds_since(t0);
  }

  void elementwise_path(bool ring) {
    const int64_t p = comm_.size(), me = comm_.rank();
    const SlotCoding coding = wl_.slots.front().coding;
    const int64_t e = coding == SlotCoding::f32 ? 4 : 2;
    const auto [e0, e1] = c_.elements(r_);
    const int64_t n = e1 - e0;
    const float inv = 1.0f / static_cast<float>(n_);
    TG_CHECK(wl_.bytes == n * e, "aggregate: ", c_.name(), "'s ", name(coding), " message of ", n,
             " elements is ", wl_.bytes, " bytes, expected ", n * e);
    st_.elementwise_path = true;
    st_.elementwise_bytes = static_cast<int>(e);

    // One worker's message of r as bytes of e per element, in element order (the slots are
    // contiguous in the flat gradient and back to back in the message): f32 slots are the
    // gradient's own floats, read in place; f16 ones are encoded.
    auto t0 = Clock::now();
    std::vector<const uint8_t*> msg(static_cast<size_t>(w_));
    Tensor encoded;
    if (coding == SlotCoding::f32) {
      for (int64_t k = 0; k < w_; ++k)
        msg[k] = reinterpret_cast<const uint8_t*>(grads_[k].data<float>() + e0);
    } else {
      encoded = Tensor::empty({w_ * n * e}, DType::u8, d_);
      for (int64_t k = 0; k < w_; ++k) {
        Tensor m = encoded.slice(0, k * n * e, (k + 1) * n * e);
        c_.encode(grads_[k], shared_.data(), step_, static_cast<int>(first_ + k), m, r_);
        msg[k] = encoded.data<uint8_t>() + k * n * e;
      }
    }
    st_.encode_s += seconds_since(t0);

    if (ring && coding == SlotCoding::f32) {
      // The local workers in order, then the ring's sum over ranks, then the average.
      st_.routes.assign(r_.size(), Route::ring);
      t0 = Clock::now();
      Tensor acc = Tensor::zeros({n}, DType::f32, d_);
      for (int64_t k = 0; k < w_; ++k) add_coded(d_, coding, msg[k], n, acc.data<float>());
      st_.reduce_s += seconds_since(t0);
      t0 = Clock::now();
      const comm::WireBytes before = comm_.wire();
      comm_.allreduce(acc.data<float>(), n, DType::f32, comm::ReduceOp::sum);
      // A ring: this rank's bytes go to one neighbour and come from the other.
      if (o_.nodes.nodes() > 1) {
        const comm::WireBytes w = delta(before, comm_.wire());
        const auto node = [&](int64_t q) {
          return o_.nodes.node_of[static_cast<size_t>((q + p) % p)];
        };
        add_inter(
            {node(me - 1) != node(me) ? w.sent : 0, node(me + 1) != node(me) ? w.received : 0});
      }
      st_.comm_s += seconds_since(t0);
      t0 = Clock::now();
      Tensor o = out_.slice(0, e0, e1);
      o.zero_();
      axpy(d_, n, inv, acc.data<float>(), o.data<float>());
      st_.reduce_s += seconds_since(t0);
      return;
    }
    if (const int64_t g = node_fold_lanes(o_.nodes, p, w_, e, n); g > 0) {
      node_fold_path(g, coding, e, msg, e0, n, inv);
      return;
    }
    const int64_t range = (n + p - 1) / p;  // elements each rank owns (C)
    if (gathers_values(p, w_, e, n)) {
      // Every rank's messages to every rank in one phase instead of two (each phase waits for
      // the slowest rank), at no more bytes; every rank then adds all N messages in worker order:
      // the owners' sums of step 2 below, bit for bit.
      st_.routes.assign(r_.size(), Route::allgather);
      t0 = Clock::now();
      const uint8_t* in = msg[0];
      Tensor mine;
      if (w_ > 1 && coding == SlotCoding::f32) {  // f16 messages are already back to back
        mine = Tensor::empty({w_ * n * e}, DType::u8, d_);
        for (int64_t k = 0; k < w_; ++k)
          copy_bytes(d_, mine.data<uint8_t>() + k * n * e, msg[k], static_cast<size_t>(n * e));
        in = mine.data<uint8_t>();
      }
      st_.encode_s += seconds_since(t0);
      // An allgather without the copy of this rank's own messages: every peer's W messages into
      // theirs, this rank's read in place.
      t0 = Clock::now();
      const auto bytes = static_cast<size_t>(w_ * n * e);
      Tensor theirs = Tensor::empty({(p - 1) * w_ * n * e}, DType::u8, d_);
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      std::vector<const uint8_t*> msgs(static_cast<size_t>(n_));
      for (int64_t q = 0; q < p; ++q) {
        uint8_t* at = theirs.data<uint8_t>() + (q < me ? q : q - 1) * w_ * n * e;
        for (int64_t k = 0; k < w_; ++k) msgs[q * w_ + k] = q == me ? msg[k] : at + k * n * e;
        if (q == me) continue;
        sends.push_back({static_cast<int>(q), in, bytes});
        recvs.push_back({static_cast<int>(q), at, bytes});
      }
      uniform_collective([&] { comm_.exchange(sends, recvs); });
      st_.comm_s += seconds_since(t0);
      t0 = Clock::now();
      average_in_order(d_, coding, msgs, n, inv, out_.slice(0, e0, e1));
      st_.reduce_s += seconds_since(t0);
      return;
    }
    st_.routes.assign(r_.size(), Route::reduce_scatter);
    auto span_of = [&](int64_t q) { return std::clamp<int64_t>(n - q * range, 0, range); };

    // send[q][k] = local worker k's range q (zero beyond n); recv[r][k] = rank r's worker k's
    // range of this rank: global worker r * W + k.
    t0 = Clock::now();
    const int64_t block = range * e;  // bytes of one worker's range
    Tensor send = cut_ranges(msg, p, range, e, n);
    st_.encode_s += seconds_since(t0);

    t0 = Clock::now();
    Tensor recv = Tensor::empty({p * w_ * block}, DType::u8, d_);
    uniform_collective([&] {
      comm_.alltoall(send.data<uint8_t>(), recv.data<uint8_t>(), static_cast<size_t>(w_ * block));
    });
    st_.comm_s += seconds_since(t0);

    t0 = Clock::now();
    Tensor mine = Tensor::zeros({range}, DType::f32, d_);
    const int64_t len = span_of(me);  // the padding of a short last range stays 0
    std::vector<const uint8_t*> ranges(static_cast<size_t>(n_));
    for (int64_t g = 0; g < n_; ++g) ranges[g] = recv.data<uint8_t>() + g * block;
    average_in_order(d_, coding, ranges, len, inv, mine.slice(0, 0, len));
    st_.reduce_s += seconds_since(t0);

    t0 = Clock::now();
    Tensor all = Tensor::empty({p * range}, DType::f32, d_);
    uniform_collective([&] {
      comm_.allgather(mine.data<float>(), all.data<float>(), static_cast<size_t>(range) * 4);
    });
    out_.slice(0, e0, e1).copy_from(all.slice(0, 0, n));
    st_.comm_s += seconds_since(t0);
  }

  // The W messages of n values of e bytes cut into `parts` ranges of `range` values: block
  // (q, k) = worker k's range q, zero beyond n. Every byte is written once: the ranges, and zeros
  // only in the short last range's padding (the whole buffer zeroed first cost a full extra pass
  // over the gradient per call).
  Tensor cut_ranges(const std::vector<const uint8_t*>& msg, int64_t parts, int64_t range, int64_t e,
                    int64_t n) {
    const int64_t block = range * e;
    Tensor out = Tensor::empty({parts * w_ * block}, DType::u8, d_);
    for (int64_t q = 0; q < parts; ++q)
      for (int64_t k = 0; k < w_; ++k) {
        const int64_t len = std::clamp<int64_t>(n - q * range, 0, range) * e;
        const int64_t at = (q * w_ + k) * block;
        copy_bytes(d_, out.data<uint8_t>() + at, msg[k] + q * block, static_cast<size_t>(len));
        if (len < block) out.slice(0, at + len, at + block).zero_();
      }
    return out;
  }

  // The elementwise path over M nodes of G ranks (node_fold_lanes, aggregate.h): the fold in
  // worker order is a prefix sum, so it can travel. Each node is cut into G lanes (ranges of
  // ceil(n / G) elements), lane j owned by the node's j-th rank.
  //   1. inside the node: every rank's W messages' range j to the node's rank j;
  //   2. node 0's owners fold their node's workers from 0, send the partial sums to the next
  //      node's owner of the lane, which folds its workers on, ... (M - 1 rounds);
  //   3. the last node's owners average (0 + inv * acc) and send the averages to the lane's
  //      owner in every other node;
  //   4. inside the node: an allgather of the G lanes into out.
  // The same additions in the same order as the flat path, so the same bits; across the node
  // links only partial sums and averages travel, 4 bytes an element.
  void node_fold_path(int64_t g, SlotCoding coding, int64_t e,
                      const std::vector<const uint8_t*>& msg, int64_t e0, int64_t n, float inv) {
    const int64_t p = comm_.size(), me = comm_.rank(), m = p / g;
    const int64_t node = me / g, lane = me % g, base = node * g;
    const int64_t range = (n + g - 1) / g;
    const int64_t block = range * e;  // bytes of one worker's lane
    auto span_of = [&](int64_t q) { return std::clamp<int64_t>(n - q * range, 0, range); };
    auto run = [&](const std::vector<comm::SendSpec>& sends,
                   const std::vector<comm::RecvSpec>& recvs) {
      comm_.exchange(sends, recvs);
      comm::WireBytes inter;
      for (const comm::SendSpec& x : sends)
        if (x.peer / g != node) inter.sent += x.bytes;
      for (const comm::RecvSpec& x : recvs)
        if (x.peer / g != node) inter.received += x.bytes;
      add_inter(inter);
    };
    st_.routes.assign(r_.size(), Route::hierarchical);

    // 1. send[q][k] = local worker k's lane q (zero beyond n); from[q][k] = local rank q's.
    auto t0 = Clock::now();
    Tensor send = cut_ranges(msg, g, range, e, n);
    st_.encode_s += seconds_since(t0);
    t0 = Clock::now();
    Tensor from = Tensor::empty({g * w_ * block}, DType::u8, d_);
    {
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      for (int64_t q = 0; q < g; ++q) {
        if (q == lane) continue;
        const auto bytes = static_cast<size_t>(w_ * block);
        sends.push_back({static_cast<int>(base + q), send.data<uint8_t>() + q * w_ * block, bytes});
        recvs.push_back({static_cast<int>(base + q), from.data<uint8_t>() + q * w_ * block, bytes});
      }
      run(sends, recvs);
    }
    std::vector<const uint8_t*> mine(static_cast<size_t>(g * w_));  // the node's workers, in order
    for (int64_t q = 0; q < g; ++q)
      for (int64_t k = 0; k < w_; ++k)
        mine[static_cast<size_t>(q * w_ + k)] =
            (q == lane ? send.data<uint8_t>() + lane * w_ * block
                       : from.data<uint8_t>() + q * w_ * block) +
            k * block;
    st_.comm_s += seconds_since(t0);

    // 2, 3. The fold along the nodes and the averages back, pipelined: each lane cut into K
    // pieces (as many as the bucket has chunks of chunk_bytes), piece c leaving node h in round
    // c + h, so that the partial sums of one piece go forward while the averages of an earlier
    // one come back (on a link both ways at once). After round t node h > 0 folds piece
    // t - h + 1; the last node averages it and sends it in round t + 1.
    const int64_t len = span_of(lane);
    const int64_t pieces = fold_pieces(range, e, n, o_.chunk_bytes);
    const int64_t piece = (range + pieces - 1) / pieces;
    auto lo = [&](int64_t c) { return std::min(c * piece, range); };
    auto hi = [&](int64_t c) { return std::min((c + 1) * piece, range); };
    Tensor acc = Tensor::zeros({range}, DType::f32, d_),
           avg = Tensor::zeros({range}, DType::f32, d_);
    auto fold_piece = [&](int64_t c) {
      const auto t1 = Clock::now();
      const int64_t a = std::min(lo(c), len), b = std::min(hi(c), len);
      std::vector<const uint8_t*> at(mine.size());
      for (size_t i = 0; i < mine.size(); ++i) at[i] = mine[i] + a * e;
      fold_in_order(d_, coding, at, b - a, acc.data<float>() + a);
      if (node == m - 1) axpy(d_, b - a, inv, acc.data<float>() + a, avg.data<float>() + a);
      st_.reduce_s += seconds_since(t1);
    };
    auto bytes_of = [&](int64_t c) { return static_cast<size_t>(hi(c) - lo(c)) * 4; };
    if (node == 0)
      for (int64_t c = 0; c < pieces; ++c) fold_piece(c);
    for (int64_t t = 0; t + 1 < pieces + m; ++t) {
      t0 = Clock::now();
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      if (const int64_t c = t - node; node + 1 < m && c >= 0 && c < pieces)
        sends.push_back(
            {static_cast<int>((node + 1) * g + lane), acc.data<float>() + lo(c), bytes_of(c)});
      if (const int64_t c = t - (node - 1); node > 0 && c >= 0 && c < pieces)
        recvs.push_back(
            {static_cast<int>((node - 1) * g + lane), acc.data<float>() + lo(c), bytes_of(c)});
      if (const int64_t c = t - (m - 1); c >= 0 && c < pieces) {
        if (node == m - 1)
          for (int64_t k = 0; k + 1 < m; ++k)
            sends.push_back(
                {static_cast<int>(k * g + lane), avg.data<float>() + lo(c), bytes_of(c)});
        else
          recvs.push_back(
              {static_cast<int>((m - 1) * g + lane), avg.data<float>() + lo(c), bytes_of(c)});
      }
      run(sends, recvs);
      st_.comm_s += seconds_since(t0);
      if (const int64_t c = t - node + 1; node > 0 && c >= 0 && c < pieces) fold_piece(c);
    }
    t0 = Clock::now();

    // 4. The node's lanes into out.
    const auto partial = static_cast<size_t>(range) * 4;
    Tensor all = Tensor::empty({g * range}, DType::f32, d_);
    {
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      for (int64_t q = 0; q < g; ++q) {
        if (q == lane) continue;
        sends.push_back({static_cast<int>(base + q), avg.data<float>(), partial});
        recvs.push_back({static_cast<int>(base + q), all.data<float>() + q * range, partial});
      }
      run(sends, recvs);
    }
    for (int64_t q = 0; q < g; ++q) {
      const int64_t k = span_of(q);
      if (k == 0) continue;
      const float* src = q == lane ? avg.data<float>() : all.data<float>() + q * range;
      copy_bytes(d_, out_.data<float>() + e0 + q * range, src, static_cast<size_t>(k) * 4);
    }
    st_.comm_s += seconds_since(t0);
  }

  void ternary_path() {
    const auto& layout = c_.layout();
    const int w = static_cast<int>(w_);
    const PackFormat f = wl_.pack;
    const std::vector<SlotWire>& fmt = wl_.slots;  // fmt[t - r.first]: slot t
    const int64_t b = wl_.bytes;
    const size_t slots = r_.size();
    st_.ternary_path = true;
    auto is_ternary = [&](size_t i) { return fmt[i].coding == SlotCoding::ternary; };

    // The bucket: every ternary slot, in layout order; the gathered block: every f32 slot.
    // Every rank derives both, and resolves `automatic`, from the same sizes, so all agree.
    std::vector<int64_t> bucket_numel;
    std::vector<int64_t> block_offset(slots, -1);
    int64_t g_bytes = 0;
    for (size_t i = 0; i < slots; ++i) {
      if (is_ternary(i)) {
        ++st_.ternary_slots;
        bucket_numel.push_back(layout[r_.first + i].numel);
      } else {
        ++st_.raw_slots;
        block_offset[i] = g_bytes;
        g_bytes += fmt[i].bytes;  // numel floats: the block stays 4-byte aligned
      }
    }
    const TernaryPipeline pipeline{o_.chunk_bytes, o_.overlap ? collectives_ : nullptr, o_.nodes};
    const Route asked = bucket_route_for(o_.algorithm);
    st_.bucket_route = asked == Route::automatic
                           ? choose_bucket_route(bucket_shape(comm_, w, bucket_numel, f, pipeline))
                           : asked;
    st_.bucket_bytes = bucket_code_bytes(bucket_numel, f);
    st_.bucket_chunks = st_.bucket_bytes == 0 ? 0
                        : o_.chunk_bytes == 0
                            ? 1
                            : (st_.bucket_bytes + o_.chunk_bytes - 1) / o_.chunk_bytes;
    st_.routes.assign(slots, Route::gathered);
    for (size_t i = 0; i < slots; ++i)
      if (is_ternary(i)) st_.routes[i] = st_.bucket_route;

    // Encode the W messages. With no raw slot a message IS the bucket (slots back to back, each
    // packed_bytes long); otherwise cut the codes and the raw floats apart.
    auto t0 = Clock::now();
    Tensor msgs = Tensor::empty({w_ * b}, DType::u8, d_);
    for (int k = 0; k < w; ++k) {
      Tensor msg = msgs.slice(0, k * b, (k + 1) * b);
      c_.encode(grads_[k], shared_.data(), step_, static_cast<int>(first_ + k), msg, r_);
    }
    Tensor bucket = msgs;
    Tensor block;
    if (st_.raw_slots > 0) {
      bucket = Tensor::empty({w_ * st_.bucket_bytes}, DType::u8, d_);
      block = Tensor::empty({w_ * g_bytes}, DType::u8, d_);
      for (int k = 0; k < w; ++k) {
        int64_t at = k * st_.bucket_bytes;
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
    st_.encode_s += seconds_since(t0);

    // The integer sums of every slot start at 0; of the floats only the raw slots' are read (the
    // rest of a whole-range zeroing was a pass over 4n bytes per call for nothing). The sharded
    // routes decode each sum once, straight into its final value in out (ScaledSums): then there
    // is no integer accumulator to zero and no scaling pass (a third of their decode's time).
    const bool direct = writes_scaled_sums(st_.bucket_route);
    const auto [e0, e1] = c_.elements(r_);
    Accumulator acc{direct ? Tensor() : Tensor::zeros({e1 - e0}, DType::i32, d_),
                    Tensor::empty({e1 - e0}, DType::f32, d_), e0};
    acc.ints_final = direct;
    for (size_t i = 0; i < slots; ++i)
      if (!is_ternary(i)) {
        const GradSlot& s = layout[r_.first + i];
        acc.floats.slice(0, s.offset - e0, s.offset - e0 + s.numel).zero_();
      }

    // The bucket in one collective (per chunk), then the raw block in one allgather.
    t0 = Clock::now();
    std::vector<int32_t*> slot_acc;
    ScaledSums scaled;
    for (size_t i = 0; i < slots; ++i) {
      if (!is_ternary(i)) continue;
      const GradSlot& s = layout[r_.first + i];
      slot_acc.push_back(direct ? nullptr : acc.int_at(s.offset));
      if (!direct) continue;
      scaled.out.push_back(out_.data<float>() + s.offset);
      scaled.scale.push_back(
          c_.integer_sum_scale(shared_.data(), step_, static_cast<int>(n_), r_, r_.first + i));
    }
    const TernaryResult res =
        ternary_aggregate_bucket(comm_, st_.bucket_route, bucket.data<uint8_t>(), w, bucket_numel,
                                 f, slot_acc, pipeline, direct ? &scaled : nullptr);
    TG_CHECK(res.scaled == direct, "aggregate on rank ", comm_.rank(), ": route ", name(res.route),
             " did not write the scaled sums it was given");
    st_.inter_wire = res.inter;
    Tensor all;
    if (g_bytes > 0) {
      all = Tensor::empty({n_ * g_bytes}, DType::u8, d_);
      comm_.allgather(block.data<uint8_t>(), all.data<uint8_t>(),
                      static_cast<size_t>(w_ * g_bytes));
    }
    st_.comm_s += seconds_since(t0);

    // The raw slots in global worker order, summed as TernGradCompressor::accumulate sums them
    // (axpy with alpha 1); then one scaling of every sum.
    t0 = Clock::now();
    for (int64_t g = 0; g < n_ && g_bytes > 0; ++g) {
      const uint8_t* blk = all.data<uint8_t>() + g * g_bytes;
      for (size_t i = 0; i < slots; ++i) {
        if (block_offset[i] < 0) continue;
        const GradSlot& s = layout[r_.first + i];
        axpy(d_, s.numel, 1.0f, reinterpret_cast<const float*>(blk + block_offset[i]),
             acc.float_at(s.offset));
      }
    }
    c_.finalize(acc, shared_.data(), step_, static_cast<int>(n_), out_, r_);
    st_.reduce_s += seconds_since(t0);
  }

  void add_inter(const comm::WireBytes& w) {
    st_.inter_wire.sent += w.sent;
    st_.inter_wire.received += w.received;
  }
  // Runs an allgather or alltoall and counts its bytes across nodes.
  template <class F>
  void uniform_collective(F&& run) {
    const comm::WireBytes before = comm_.wire();
    run();
    add_inter(across_nodes(delta(before, comm_.wire()), o_.nodes, comm_.rank()));
  }

  Compressor& c_;
  comm::Communicator& comm_;
  const Device d_;
  std::span<const Tensor> grads_;
  const int64_t step_;
  Tensor& out_;
  const AggregateOptions& o_;
  const SlotRange r_;
  WorkerThread* const collectives_;
  const int64_t w_, n_, first_;  // W, N = P W, this rank's first global worker
  const WireLayout wl_;
  std::vector<float> shared_;
  AggregateStats st_;
};

}  // namespace

bool AggregateStats::took(Route r) const {
  return std::find(routes.begin(), routes.end(), r) != routes.end();
}

std::string describe(std::span<const AggregateStats> buckets) {
  int64_t slots = 0, gathered = 0, ternary_slots = 0, code_bytes = 0, chunks = 0,
          elementwise_bytes = 0;
  std::vector<int64_t> by_route(std::size(kBucketRoutes), 0);
  bool ternary = false, elementwise = false, ring = false, gathered_values = false,
       folded_on_nodes = false;
  comm::WireBytes wire, inter;
  for (const AggregateStats& b : buckets) {
    slots += static_cast<int64_t>(b.routes.size());
    for (Route r : b.routes) {
      gathered += r == Route::gathered;
      for (size_t k = 0; k < std::size(kBucketRoutes); ++k)
        by_route[k] += b.ternary_path && r == kBucketRoutes[k];
    }
    ternary_slots += b.ternary_slots;
    code_bytes += b.bucket_bytes;
    chunks += b.bucket_chunks;
    ternary = ternary || b.ternary_path;
    if (b.elementwise_path) {
      elementwise = true;
      elementwise_bytes = b.elementwise_bytes;
      ring = ring || b.took(Route::ring);
      gathered_values = gathered_values || b.took(Route::allgather);
      folded_on_nodes = folded_on_nodes || b.took(Route::hierarchical);
    }
    wire.sent += b.wire.sent;
    wire.received += b.wire.received;
    inter.sent += b.inter_wire.sent;
    inter.received += b.inter_wire.received;
  }
  std::string line;
  if (ternary) {
    line = "ternary: ";
    for (size_t k = 0; k < std::size(kBucketRoutes); ++k)
      if (by_route[k] > 0)
        line += tg::detail::concat(by_route[k], " ", name(kBucketRoutes[k]), ", ");
    line +=
        tg::detail::concat(gathered, " gathered raw fp32; bucket of ", ternary_slots, " slots, ",
                           code_bytes, " B per worker, ", chunks, " chunk", chunks == 1 ? "" : "s");
  } else if (elementwise) {
    const char* how = gathered_values   ? " allgather (no more bytes than reduce-scatter + "
                                          "allgather at this P) of "
                      : folded_on_nodes ? " fold along the nodes (partial sums across them) of "
                                        : " reduce-scatter + allgather of ";
    line = ring ? tg::detail::concat("f32 ring allreduce of ", slots, " slots")
                : tg::detail::concat(elementwise_bytes == 4 ? "f32" : "f16", how, slots,
                                     " slots, summed in worker order");
  } else {
    line = tg::detail::concat("generic allgather of ", slots, " slots");
  }
  line = tg::detail::concat(line, "; wire sent ", wire.sent, " B received ", wire.received, " B");
  if (inter.sent + inter.received > 0)
    line = tg::detail::concat(line, " (across nodes sent ", inter.sent, " B received ",
                              inter.received, " B)");
  return line;
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
  options.nodes.check(comm.size());
  return BucketExchange(c, comm, local_grads, step, out, options, r, collectives).run();
}

AggregateStats aggregate_local(Compressor& c, std::span<const Tensor> worker_grads, int64_t step,
                               Tensor& out, SlotRange r) {
  TG_CHECK(!worker_grads.empty(), "aggregate_local: no worker gradients");
  const std::unique_ptr<comm::Communicator> self =
      comm::make_self_communicator(worker_grads[0].device());
  return aggregate(c, *self, worker_grads, step, out, {}, r);
}

}  // namespace tg::tern
