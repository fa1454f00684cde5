// The exact ternary bucket routes (terngrad/exchange/ternary_collectives.h) on top of any
// comm::Communicator, each rank running its own part of the plan of terngrad/exchange/plan.h.
// One explicit device switch per kernel call; temporaries are tensors from the device's caching
// allocator.
#include "terngrad/exchange/ternary_collectives.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"
#include "terngrad/sum_radix.h"

namespace tg::tern {

namespace {

// ---- device dispatch ----------------------------------------------------------------------

[[noreturn]] void no_cuda(const Device& d) {
  TG_THROW("ternary collective on ", d.str(), ": this build has no CUDA support");
}

// For every piece p: acc_of(p) += the codes of `count` vectors of p.n elements, vector v at
// base + p.byte + v * stride. One batched call (CUDA: one launch per 60 pieces).
template <class AccOf>
void unpack_pieces(const Device& d, const std::vector<Piece>& pieces, const uint8_t* base,
                   int64_t count, size_t stride, PackFormat f, AccOf acc_of) {
  if (pieces.empty() || count == 0) return;
  std::vector<UnpackTask> tasks;
  tasks.reserve(pieces.size());
  for (const Piece& p : pieces) tasks.push_back({base + p.byte, count, stride, p.n, acc_of(p)});
  switch (d.type) {
    case DeviceType::cpu:
      unpack_accumulate_batch_cpu(tasks.data(), tasks.size(), f);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      unpack_accumulate_batch_cuda(tasks.data(), tasks.size(), f);
      return;
#else
      break;
#endif
  }
  no_cuda(d);
}

void pack_sums(const Device& d, const int32_t* v, int64_t n, int32_t offset, uint64_t levels,
               uint64_t* words) {
  switch (d.type) {
    case DeviceType::cpu:
      pack_sums_cpu(v, n, offset, levels, words);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      pack_sums_cuda(v, n, offset, levels, words);
      return;
#else
      break;
#endif
  }
  no_cuda(d);
}

void unpack_sums(const Device& d, const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                 int32_t* acc) {
  switch (d.type) {
    case DeviceType::cpu:
      unpack_sums_accumulate_cpu(words, n, levels, offset, acc);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      unpack_sums_accumulate_cuda(words, n, levels, offset, acc);
      return;
#else
      break;
#endif
  }
  no_cuda(d);
}

// A span's sums (compact: piece p at sums + p.elem) -> base-`levels` words, each piece from a
// fresh word, shifted by `offset`.
void pack_span(const Device& d, const Span& s, const int32_t* sums, int32_t offset, uint64_t levels,
               uint64_t* words) {
  const std::vector<int64_t> at = piece_word_offsets(s, levels);
  for (size_t i = 0; i < s.pieces.size(); ++i)
    pack_sums(d, sums + s.pieces[i].elem, s.pieces[i].n, offset, levels, words + at[i]);
}

void unpack_sums_scaled(const Device& d, const uint64_t* words, int64_t n, uint64_t levels,
                        int32_t offset, float scale, float* out) {
  switch (d.type) {
    case DeviceType::cpu:
      unpack_sums_scaled_cpu(words, n, levels, offset, scale, out);
      return;
    case DeviceType::cuda:
#if TG_CUDA
      unpack_sums_scaled_cuda(words, n, levels, offset, scale, out);
      return;
#else
      break;
#endif
  }
  no_cuda(d);
}

// acc_of(piece) += a span's words (as pack_span wrote them) minus `offset`.
template <class AccOf>
void unpack_span(const Device& d, const Span& s, const uint64_t* words, int32_t offset,
                 uint64_t levels, AccOf acc_of) {
  const std::vector<int64_t> at = piece_word_offsets(s, levels);
  for (size_t i = 0; i < s.pieces.size(); ++i)
    unpack_sums(d, words + at[i], s.pieces[i].n, levels, offset, acc_of(s.pieces[i]));
}

// Kernels launch on the current device: make it the communicator's for the whole call.
struct OptionalDeviceGuard {
  explicit OptionalDeviceGuard(const Device& d) {
    if (d.is_cuda()) guard = std::make_unique<cuda::DeviceGuard>(d.index);
  }
  std::unique_ptr<cuda::DeviceGuard> guard;
};

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
  int64_t total;    // N = P W
  uint64_t levels;  // L = 2N + 1
  PackFormat f;
  const std::vector<int32_t*>& acc;
  const ScaledSums* scaled;  // the sharded routes write these instead of acc when given
  const Plan& plan;
  const TernaryBucketShape& shape;
  WorkerThread* collectives;  // null: the chunks' collectives on the caller's thread
};

// This rank's W slices of chunk c, contiguous (for W = 1 the bucket itself).
struct SendStage {
  Tensor buf;
  const uint8_t* at(const BucketRun& r, const Span& c) const {
    return r.workers == 1 ? r.codes + c.begin : buf.data<uint8_t>() + r.workers * c.begin;
  }
  void stage(const BucketRun& r, const Span& c) {
    if (r.workers == 1) return;
    uint8_t* dst = buf.data<uint8_t>() + r.workers * c.begin;
    for (int w = 0; w < r.workers; ++w)
      copy_bytes(r.d, dst + w * c.bytes, r.codes + w * r.plan.bucket_bytes + c.begin,
                 static_cast<size_t>(c.bytes));
  }
  explicit SendStage(const BucketRun& r) {
    if (r.workers > 1) buf = Tensor::empty({r.workers * r.plan.bucket_bytes}, DType::u8, r.d);
  }
};

// Word offsets of every chunk's sums in one whole-bucket buffer of words.
std::vector<int64_t> chunk_word_offsets(const BucketRun& r) {
  std::vector<int64_t> at(r.plan.chunks.size() + 1, 0);
  for (size_t c = 0; c < r.plan.chunks.size(); ++c)
    at[c + 1] = at[c] + span_words(r.plan.chunks[c], r.levels);
  return at;
}

int64_t max_chunk_elems(const BucketRun& r) {
  int64_t n = 1;
  for (const Span& c : r.plan.chunks) n = std::max(n, c.elems);
  return n;
}

void decode_chunk(const BucketRun& r, const Span& c, const uint64_t* words) {
  unpack_span(r.d, c, words, static_cast<int32_t>(r.total), r.levels,
              [&](const Piece& p) { return r.acc[p.seg] + p.first; });
}

void run_ps(const BucketRun& r) {
  const bool root = r.comm.rank() == 0;
  SendStage send(r);
  Tensor all, sums;
  if (root) {
    all = Tensor::empty({r.total * r.plan.bucket_bytes}, DType::u8, r.d);
    sums = Tensor::zeros({max_chunk_elems(r)}, DType::i32, r.d);
  }
  const std::vector<int64_t> word_at = chunk_word_offsets(r);
  Tensor words = Tensor::empty({word_at.back()}, DType::u64, r.d);
  uint64_t* wp = words.data<uint64_t>();
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t c) { send.stage(r, r.plan.chunks[c]); },
      [&](int64_t i) {
        const Span& c = r.plan.chunks[i];
        const size_t bytes = static_cast<size_t>(r.workers * c.bytes);
        if (root) {
          uint8_t* got = all.data<uint8_t>() + r.total * c.begin;
          r.comm.gather(send.at(r, c), got, bytes, 0);
          Tensor s = sums.slice(0, 0, c.elems);
          s.zero_();
          int32_t* sp = s.data<int32_t>();
          unpack_pieces(r.d, c.pieces, got, r.total, static_cast<size_t>(c.bytes), r.f,
                        [&](const Piece& p) { return sp + p.elem; });
          pack_span(r.d, c, sp, static_cast<int32_t>(r.total), r.levels, wp + word_at[i]);
        } else {
          r.comm.gather(send.at(r, c), nullptr, bytes, 0);
        }
        r.comm.broadcast(wp + word_at[i], static_cast<size_t>(word_at[i + 1] - word_at[i]) * 8, 0);
      },
      [&](int64_t i) { decode_chunk(r, r.plan.chunks[i], wp + word_at[i]); });
}

void run_allgather(const BucketRun& r) {
  SendStage send(r);
  Tensor all = Tensor::empty({r.total * r.plan.bucket_bytes}, DType::u8, r.d);
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t c) { send.stage(r, r.plan.chunks[c]); },
      [&](int64_t i) {
        const Span& c = r.plan.chunks[i];
        r.comm.allgather(send.at(r, c), all.data<uint8_t>() + r.total * c.begin,
                         static_cast<size_t>(r.workers * c.bytes));
      },
      [&](int64_t i) {
        const Span& c = r.plan.chunks[i];
        const uint8_t* got = all.data<uint8_t>() + r.total * c.begin;
        unpack_pieces(r.d, c.pieces, got, r.total, static_cast<size_t>(c.bytes), r.f,
                      [&](const Piece& p) { return r.acc[p.seg] + p.first; });
      });
}

void run_packed_allreduce(const BucketRun& r) {
  Tensor local = Tensor::zeros({max_chunk_elems(r)}, DType::i32, r.d);
  const std::vector<int64_t> word_at = chunk_word_offsets(r);
  Tensor words = Tensor::empty({word_at.back()}, DType::u64, r.d);
  uint64_t* wp = words.data<uint64_t>();
  const auto stride = static_cast<size_t>(r.plan.bucket_bytes);
  run_chunks(
      static_cast<int64_t>(r.plan.chunks.size()), r.collectives,
      [&](int64_t i) {
        // This rank's W workers' sums, in [-W, W], shifted by +W: the digits of P ranks add up
        // to at most 2N < L, so the words add without carry.
        const Span& c = r.plan.chunks[i];
        Tensor s = local.slice(0, 0, c.elems);
        s.zero_();
        int32_t* lp = s.data<int32_t>();
        unpack_pieces(r.d, c.pieces, r.codes + c.begin, r.workers, stride, r.f,
                      [&](const Piece& p) { return lp + p.elem; });
        pack_span(r.d, c, lp, r.workers, r.levels, wp + word_at[i]);
      },
      [&](int64_t i) {
        r.comm.allreduce(wp + word_at[i], word_at[i + 1] - word_at[i], DType::u64,
                         comm::ReduceOp::sum);
      },
      [&](int64_t i) { decode_chunk(r, r.plan.chunks[i], wp + word_at[i]); });
}

// ---- sharded and hierarchical --------------------------------------------------------------
//
// One rank's part of the plan's phases A, C, E, F (plan.h) for one chunk. The final sums of all
// P shards land in one buffer of words laid out as this rank's node shares them in F: the
// shards of the node's first rank (its local shards, ascending), then the second's, ...; so what
// a rank sends in F is one contiguous block, and each block received lands in place.
class ShardedRun {
 public:
  ShardedRun(const BucketRun& r, const comm::NodeLayout& layout)
      : r_(r), pl_(layout), me_(r.comm.rank()), node_(pl_.node_of(me_)) {
    for (int n = 0; n < pl_.nodes(); ++n)
      any_node_shared_ = any_node_shared_ || pl_.members(n).size() > 1;
  }

  // Phases A, C, E, F of chunk i: afterwards chunks_[i] holds every shard's final sums.
  void exchange(int64_t i) {
    ChunkState& state = chunks_[static_cast<size_t>(i)];
    state.sc = std::make_unique<ShardedChunk>(r_.plan, r_.plan.chunks[static_cast<size_t>(i)],
                                              r_.shape, pl_);
    const ShardedChunk& sc = *state.sc;
    const int w = r_.workers;
    const std::vector<int>& members = pl_.members(node_);
    const std::vector<int>& mine = pl_.local_shards(me_);

    // Where each shard's final sums sit in this chunk's words (see the class comment).
    std::vector<int64_t>& word_at = state.word_at;
    word_at.assign(sc.shards.size(), 0);
    int64_t words = 0;
    for (int m : members)
      for (int q : pl_.local_shards(m)) {
        word_at[static_cast<size_t>(q)] = words;
        words += sc.sum_bytes[static_cast<size_t>(q)] / 8;
      }
    Tensor& out = state.words;
    out = Tensor::empty({words}, DType::u64, r_.d);
    uint64_t* wp = out.data<uint64_t>();
    auto len = [&](int q) { return sc.shards[static_cast<size_t>(q)].bytes; };

    // A: codes of the shards each node rank sums, to it.
    std::vector<Tensor> from_member(static_cast<size_t>(pl_.ranks()));
    if (any_node_shared_) {
      std::vector<Tensor> to_member(static_cast<size_t>(pl_.ranks()));
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      for (int m : members) {
        if (m == me_) continue;
        int64_t out_bytes = 0, in_bytes = 0;
        for (int q : pl_.local_shards(m)) out_bytes += w * len(q);
        for (int q : mine) in_bytes += w * len(q);
        if (out_bytes > 0) {
          Tensor& t = to_member[static_cast<size_t>(m)];
          t = Tensor::empty({out_bytes}, DType::u8, r_.d);
          int64_t at = 0;
          for (int q : pl_.local_shards(m))
            for (int k = 0; k < w; ++k, at += len(q))
              copy_bytes(
                  r_.d, t.data<uint8_t>() + at,
                  r_.codes + k * r_.plan.bucket_bytes + sc.shards[static_cast<size_t>(q)].begin,
                  static_cast<size_t>(len(q)));
          sends.push_back({m, t.data<uint8_t>(), static_cast<size_t>(out_bytes)});
        }
        if (in_bytes > 0) {
          Tensor& t = from_member[static_cast<size_t>(m)];
          t = Tensor::empty({in_bytes}, DType::u8, r_.d);
          recvs.push_back({m, t.data<uint8_t>(), static_cast<size_t>(in_bytes)});
        }
      }
      r_.comm.exchange(sends, recvs);
    }

    // The node's sums of this rank's local shards (every one but the foreign shards a node of
    // one rank and one worker sends as codes).
    const bool raw = sc.raw_codes[static_cast<size_t>(node_)];
    std::vector<int64_t> sum_at(mine.size() + 1, 0);
    for (size_t j = 0; j < mine.size(); ++j)
      sum_at[j + 1] = sum_at[j] + sc.shards[static_cast<size_t>(mine[j])].elems;
    Tensor sums = Tensor::zeros({std::max<int64_t>(sum_at.back(), 1)}, DType::i32, r_.d);
    int32_t* sp = sums.data<int32_t>();
    int64_t member_at = 0;  // offset of shard mine[j] in each member's message (the same for all)
    for (size_t j = 0; j < mine.size(); ++j) {
      const int q = mine[j];
      const Span& s = sc.shards[static_cast<size_t>(q)];
      if (!(raw && q != me_)) {
        auto to = [&](const Piece& p) { return sp + sum_at[j] + p.elem; };
        unpack_pieces(r_.d, s.pieces, r_.codes + s.begin, w,
                      static_cast<size_t>(r_.plan.bucket_bytes), r_.f, to);
        for (int m : members)
          if (m != me_ && s.bytes > 0)
            unpack_pieces(r_.d, s.pieces,
                          from_member[static_cast<size_t>(m)].data<uint8_t>() + member_at, w,
                          static_cast<size_t>(s.bytes), r_.f, to);
      }
      member_at += w * s.bytes;
    }

    // C: the node's sums (or codes) of each foreign local shard to its owner; this rank's own
    // shard's from every other node.
    const int nodes = pl_.nodes();
    std::vector<Tensor> from_node(static_cast<size_t>(nodes));
    if (nodes > 1) {
      std::vector<Tensor> node_words;
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      for (size_t j = 0; j < mine.size(); ++j) {
        const int q = mine[j];
        if (q == me_) continue;
        const Span& s = sc.shards[static_cast<size_t>(q)];
        const auto bytes = static_cast<size_t>(
            sc.node_sum_bytes[static_cast<size_t>(node_)][static_cast<size_t>(q)]);
        if (bytes == 0) continue;
        if (raw) {
          sends.push_back({q, r_.codes + s.begin, bytes});
          continue;
        }
        node_words.push_back(Tensor::empty({static_cast<int64_t>(bytes / 8)}, DType::u64, r_.d));
        pack_span(r_.d, s, sp + sum_at[j], static_cast<int32_t>(pl_.members(node_).size()) * w,
                  sc.node_levels[static_cast<size_t>(node_)], node_words.back().data<uint64_t>());
        sends.push_back({q, node_words.back().data<uint64_t>(), bytes});
      }
      for (int n = 0; n < nodes; ++n) {
        if (n == node_) continue;
        const auto bytes = static_cast<size_t>(
            sc.node_sum_bytes[static_cast<size_t>(n)][static_cast<size_t>(me_)]);
        if (bytes == 0) continue;
        from_node[static_cast<size_t>(n)] =
            Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, r_.d);
        recvs.push_back(
            {pl_.local_owner(n, me_), from_node[static_cast<size_t>(n)].data<uint8_t>(), bytes});
      }
      r_.comm.exchange(sends, recvs);
    }

    // This rank's shard: its node's sum plus every other node's, packed in base L.
    {
      const size_t j = static_cast<size_t>(std::find(mine.begin(), mine.end(), me_) - mine.begin());
      const Span& s = sc.shards[static_cast<size_t>(me_)];
      int32_t* gs = sp + sum_at[j];
      auto to = [&](const Piece& p) { return gs + p.elem; };
      for (int n = 0; n < nodes; ++n) {
        const Tensor& got = from_node[static_cast<size_t>(n)];
        if (n == node_ || !got.defined()) continue;
        if (sc.raw_codes[static_cast<size_t>(n)])
          unpack_pieces(r_.d, s.pieces, got.data<uint8_t>(), 1, static_cast<size_t>(s.bytes), r_.f,
                        to);
        else
          unpack_span(r_.d, s, reinterpret_cast<const uint64_t*>(got.data<uint8_t>()),
                      static_cast<int32_t>(pl_.members(n).size()) * w,
                      sc.node_levels[static_cast<size_t>(n)], to);
      }
      pack_span(r_.d, s, gs, static_cast<int32_t>(r_.total), r_.levels,
                wp + word_at[static_cast<size_t>(me_)]);
    }

    // E: this rank's final sums to its shard's local owner in every other node; the final sums
    // of this rank's foreign local shards from their owners.
    if (nodes > 1) {
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      const auto mine_bytes = static_cast<size_t>(sc.sum_bytes[static_cast<size_t>(me_)]);
      for (int n = 0; n < nodes; ++n)
        if (n != node_ && mine_bytes > 0)
          sends.push_back(
              {pl_.local_owner(n, me_), wp + word_at[static_cast<size_t>(me_)], mine_bytes});
      for (int q : mine) {
        const auto bytes = static_cast<size_t>(sc.sum_bytes[static_cast<size_t>(q)]);
        if (q != me_ && bytes > 0)
          recvs.push_back({q, wp + word_at[static_cast<size_t>(q)], bytes});
      }
      r_.comm.exchange(sends, recvs);
    }

    // F: the final sums of each rank's local shards to the rest of its node.
    if (any_node_shared_) {
      std::vector<comm::SendSpec> sends;
      std::vector<comm::RecvSpec> recvs;
      auto block = [&](int m) {
        int64_t bytes = 0;
        for (int q : pl_.local_shards(m)) bytes += sc.sum_bytes[static_cast<size_t>(q)];
        return std::pair<uint64_t*, size_t>{
            wp + word_at[static_cast<size_t>(pl_.local_shards(m).front())],
            static_cast<size_t>(bytes)};
      };
      for (int m : members) {
        if (m == me_ || pl_.local_shards(m).empty()) continue;
        const auto [mine_at, mine_bytes] = block(me_);
        const auto [their_at, their_bytes] = block(m);
        if (mine_bytes > 0) sends.push_back({m, mine_at, mine_bytes});
        if (their_bytes > 0) recvs.push_back({m, their_at, their_bytes});
      }
      r_.comm.exchange(sends, recvs);
    }
  }

  // Every shard of chunk i into the accumulators, or straight into the scaled outputs (each
  // element's sum arrives once, in exactly one shard of one chunk).
  void decode(int64_t i) {
    ChunkState& state = chunks_[static_cast<size_t>(i)];
    const uint64_t* wp = state.words.data<uint64_t>();
    const auto offset = static_cast<int32_t>(r_.total);
    for (size_t q = 0; q < state.sc->shards.size(); ++q) {
      const Span& s = state.sc->shards[q];
      if (r_.scaled == nullptr) {
        unpack_span(r_.d, s, wp + state.word_at[q], offset, r_.levels,
                    [&](const Piece& pc) { return r_.acc[pc.seg] + pc.first; });
        continue;
      }
      const std::vector<int64_t> at = piece_word_offsets(s, r_.levels);
      for (size_t k = 0; k < s.pieces.size(); ++k) {
        const Piece& pc = s.pieces[k];
        unpack_sums_scaled(r_.d, wp + state.word_at[q] + at[k], pc.n, r_.levels, offset,
                           r_.scaled->scale[static_cast<size_t>(pc.seg)],
                           r_.scaled->out[static_cast<size_t>(pc.seg)] + pc.first);
      }
    }
    state = ChunkState{};  // its buffers back to the allocator
  }

  void run() {
    const auto chunks = static_cast<int64_t>(r_.plan.chunks.size());
    chunks_.resize(static_cast<size_t>(chunks));
    run_chunks(
        chunks, r_.collectives, [](int64_t) {}, [&](int64_t i) { exchange(i); },
        [&](int64_t i) { decode(i); });
  }

 private:
  const BucketRun& r_;
  const ShardPlacement pl_;
  const int me_, node_;
  bool any_node_shared_ = false;  // some node has two or more ranks: phases A and F run
  // Per chunk, from its exchange to its decode (the collectives thread writes, this one reads
  // after run_chunks says the chunk is done): its shards, and every shard's final sums.
  struct ChunkState {
    std::unique_ptr<ShardedChunk> sc;
    Tensor words;
    std::vector<int64_t> word_at;  // per shard: where its sums start in `words`
  };
  std::vector<ChunkState> chunks_;
};

}  // namespace

bool writes_scaled_sums(Route route) {
  return route == Route::sharded || route == Route::hierarchical;
}

TernaryBucketShape bucket_shape(const comm::Communicator& comm, int workers,
                                const std::vector<int64_t>& numel, PackFormat format,
                                const TernaryPipeline& pipeline) {
  return {numel,          comm.size(),          workers,       format,
          comm.backend(), pipeline.chunk_bytes, pipeline.nodes};
}

TernaryResult ternary_aggregate_bucket(comm::Communicator& comm, Route route, const uint8_t* codes,
                                       int workers, const std::vector<int64_t>& numel,
                                       PackFormat format, const std::vector<int32_t*>& acc,
                                       const TernaryPipeline& pipeline, const ScaledSums* scaled) {
  const TernaryBucketShape shape = bucket_shape(comm, workers, numel, format, pipeline);
  check_bucket_shape(shape);
  TG_CHECK(route == Route::automatic || is_bucket_route(route), "ternary collective on rank ",
           comm.rank(), ": '", name(route), "' is not a ternary bucket route");
  TG_CHECK(acc.size() == numel.size(), "ternary collective on rank ", comm.rank(), ": ", acc.size(),
           " accumulators for ", numel.size(), " segments (expected one each)");
  TG_CHECK(scaled == nullptr ||
               (scaled->out.size() == numel.size() && scaled->scale.size() == numel.size()),
           "ternary collective on rank ", comm.rank(), ": scaled outputs for ",
           scaled ? scaled->out.size() : 0, " segments and ", scaled ? scaled->scale.size() : 0,
           " scales, for ", numel.size(), " segments (expected one each)");
  TernaryResult result;
  result.route = route == Route::automatic ? choose_bucket_route(shape) : route;
  result.scaled = scaled != nullptr && writes_scaled_sums(result.route);
  for (size_t s = 0; s < numel.size(); ++s)
    TG_CHECK(numel[s] == 0 || (codes != nullptr &&
                               (result.scaled ? scaled->out[s] != nullptr : acc[s] != nullptr)),
             "ternary collective on rank ", comm.rank(), ": null codes or ",
             result.scaled ? "output" : "accumulator", " for segment ", s, " of ", numel[s],
             " elements");
  const Plan plan = plan_bucket(numel, format, pipeline.chunk_bytes);
  // Every rank knows the sizes, so an empty bucket is skipped by all ranks alike (no zero-byte
  // messages).
  if (plan.chunks.empty()) return result;

  const comm::WireBytes before = comm.wire();
  OptionalDeviceGuard guard(comm.device());
  const int64_t total = static_cast<int64_t>(comm.size()) * workers;
  const BucketRun run{comm,
                      comm.device(),
                      codes,
                      workers,
                      total,
                      sum_levels(total),
                      format,
                      acc,
                      result.scaled ? scaled : nullptr,
                      plan,
                      shape,
                      comm.size() > 1 && comm.device().is_cpu() ? pipeline.collectives : nullptr};
  switch (result.route) {
    case Route::ps:
      run_ps(run);
      break;
    case Route::allgather:
      run_allgather(run);
      break;
    case Route::packed_allreduce:
      run_packed_allreduce(run);
      break;
    case Route::sharded:
      ShardedRun(run, comm::NodeLayout::each_alone(comm.size())).run();
      break;
    case Route::hierarchical:
      ShardedRun(run, shape.nodes.known() ? shape.nodes : comm::NodeLayout::each_alone(comm.size()))
          .run();
      break;
    default:
      TG_THROW("ternary collective: unreachable route ", name(result.route));
  }
  const comm::WireBytes after = comm.wire();
  result.wire = {after.sent - before.sent, after.received - before.received};
  if (shape.nodes.known() && shape.nodes.nodes() > 1)
    result.inter = ternary_bucket_cost(result.route, shape, comm.rank()).rank_inter;
  return result;
}

}  // namespace tg::tern
