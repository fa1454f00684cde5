// The exact ternary collectives: the k-bit field layout against a naive bit-by-bit reference, the
// cost model against hand-computed figures, and every algorithm on the local communicator (P =
// 1..5 rank threads, W = 1..3 workers each, n from 0 to 100003) yielding bit-identical
// accumulators equal to the plain sum of the unpacked codes, with the wire bytes the cost model
// predicts. Buckets (several segments in one collective, cut into chunks, decoded on one thread
// while the next chunk travels on another) against the same per-segment specification and their
// own cost model. One run over Gloo (real TCP on 127.0.0.1) checks the same against Gloo's
// schedules, a bucket included.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"
#include "nn/core/philox.h"
#include "nn/core/worker_thread.h"
#include "terngrad/exchange/ternary_collectives.h"
#include "terngrad/ternary_fields.h"
#include "terngrad/ternary_kernels.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"

namespace tg::tern {
namespace {

using namespace tg::comm;

using namespace std::chrono_literals;
using tern::PackFormat;

constexpr uint64_t kSeed = 2017;

// Worker g's packed codes: a random gradient (normal-ish, from Philox) ternarized with the
// scaler at 0.6 max|g|, so some elements clip and many are 0.
std::vector<uint8_t> worker_codes(int64_t g, int64_t n, PackFormat f) {
  std::vector<float> grad(n);
  float max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float u1 = uniform01(philox_word(kSeed, 1000 + g, 2 * i)) + 1e-7f;
    const float u2 = uniform01(philox_word(kSeed, 1000 + g, 2 * i + 1));
    grad[i] = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    max_abs = std::max(max_abs, std::fabs(grad[i]));
  }
  std::vector<uint8_t> out(tern::packed_bytes(f, n));
  tern::ternarize_pack_cpu(grad.data(), n, 0.6f * max_abs, kSeed,
                           rng_stream(RngPurpose::ternarize, 0, g, 0), f, out.data());
  return out;
}

// The specification: decode every code by hand and add.
int code_at(const std::vector<uint8_t>& packed, int64_t i, PackFormat f) {
  if (f == PackFormat::two_bit) return ((packed[i / 4] >> (2 * (i % 4))) & 3) - 1;
  int v = packed[i / 5];
  for (int64_t d = 0; d < i % 5; ++d) v /= 3;
  return v % 3 - 1;
}

struct Problem {
  int p, w;
  int64_t n;
  PackFormat f;
  std::vector<std::vector<uint8_t>> rank_codes;  // [rank] = W vectors back to back
  std::vector<int32_t> baseline, expected;       // acc before, and baseline + sum of codes
};

Problem make_problem(int p, int w, int64_t n, PackFormat f) {
  Problem pr{p,
             w,
             n,
             f,
             std::vector<std::vector<uint8_t>>(p),
             std::vector<int32_t>(n),
             std::vector<int32_t>(n)};
  for (int64_t i = 0; i < n; ++i) pr.baseline[i] = pr.expected[i] = static_cast<int32_t>(i % 7) - 3;
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < w; ++k) {
      const std::vector<uint8_t> c = worker_codes(static_cast<int64_t>(r) * w + k, n, f);
      pr.rank_codes[r].insert(pr.rank_codes[r].end(), c.begin(), c.end());
      for (int64_t i = 0; i < n; ++i) pr.expected[i] += code_at(c, i, f);
    }
  }
  return pr;
}

// Runs `algorithm` on a fresh local group and checks result, choice and wire bytes on every rank.
void check_local(const Problem& pr, TernaryAlgorithm algorithm) {
  const std::string what =
      tg::detail::concat(name(algorithm), " P=", pr.p, " W=", pr.w, " n=", pr.n,
                         pr.f == PackFormat::base3 ? " base3" : " two_bit");
  auto comms = make_local_group(pr.p, 30s);
  std::vector<std::vector<int32_t>> accs(pr.p, pr.baseline);
  std::vector<TernaryResult> results(pr.p);
  const auto errors = run_ranks(pr.p, [&](int r) {
    results[r] = ternary_aggregate(*comms[r], algorithm, pr.rank_codes[r].data(), pr.w, pr.n, pr.f,
                                   accs[r].data());
  });
  const TernaryShape shape{pr.n, pr.p, pr.w, pr.f, "local"};
  const TernaryAlgorithm ran =
      algorithm == TernaryAlgorithm::automatic ? choose_ternary_algorithm(shape) : algorithm;
  for (int r = 0; r < pr.p; ++r) {
    ASSERT_EQ(errors[r], "") << what << " rank " << r;
    ASSERT_EQ(accs[r], pr.expected) << what << " rank " << r;
    EXPECT_EQ(results[r].algorithm, ran) << what;
    const TernaryCost cost = ternary_cost(ran, shape, r);
    EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << what << " rank " << r;
    EXPECT_EQ(results[r].wire.received, cost.rank.received) << what << " rank " << r;
    EXPECT_EQ(comms[r]->wire().sent, cost.rank.sent) << what << " rank " << r;
  }
}

TEST(TernaryFields, BitsAreTheFewestThatHoldZeroTo2N) {
  for (int64_t n = 1; n <= 5000; ++n) {
    const int k = sum_field_bits(n);
    EXPECT_GT(uint64_t{1} << k, static_cast<uint64_t>(2 * n)) << n;
    EXPECT_LE(uint64_t{1} << (k - 1), static_cast<uint64_t>(2 * n)) << n;
    EXPECT_EQ(k, static_cast<int>(std::ceil(std::log2(2.0 * n + 1)))) << n;
  }
  EXPECT_EQ(sum_field_bits(1), 2);
  EXPECT_EQ(sum_field_bits(2), 3);
  EXPECT_EQ(sum_field_bits(4), 4);
  EXPECT_EQ(sum_field_bits(8), 5);
  EXPECT_EQ(sum_field_bits(int64_t{1} << 30), 32);
  EXPECT_THROW(sum_field_bits(0), Error);
  EXPECT_THROW(sum_field_bits((int64_t{1} << 30) + 1), Error);
  EXPECT_EQ(fields_per_word(3), 21);
  EXPECT_EQ(sum_field_words(21, 3), 1);
  EXPECT_EQ(sum_field_words(22, 3), 2);
  EXPECT_EQ(sum_field_words(0, 3), 0);
  EXPECT_THROW(fields_per_word(33), Error);
}

// Layout: element i at word i / f, bits (i % f) * k ..; built here one bit at a time.
TEST(TernaryFields, PackMatchesNaiveLayoutAndUnpackInverts) {
  for (int k = 1; k <= 32; ++k) {
    for (int64_t n : {0, 1, 5, 63, 64, 65, 1000, 40000}) {
      const int64_t f = 64 / k;
      const int32_t offset = k == 1 ? 0 : 3;
      std::vector<int32_t> v(n);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = philox_word(7, k, i);
        // k = 32: stay where v + offset and v + 5 fit in int32.
        const uint64_t range = k == 32 ? (uint64_t{1} << 31) - 16 : uint64_t{1} << k;
        v[i] = static_cast<int32_t>(r % range) - offset;
      }
      std::vector<uint64_t> words(sum_field_words(n, k), 0xdeadbeefULL);
      pack_sum_fields_cpu(v.data(), n, offset, k, words.data());
      std::vector<uint64_t> naive((n + f - 1) / f, 0);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t field = static_cast<uint32_t>(v[i] + offset);
        for (int b = 0; b < k; ++b) {
          if ((field >> b) & 1) naive[i / f] |= uint64_t{1} << ((i % f) * k + b);
        }
      }
      ASSERT_EQ(words, naive) << "k=" << k << " n=" << n;
      std::vector<int32_t> acc(n, 5);
      unpack_sum_fields_accumulate_cpu(words.data(), n, k, offset, acc.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(acc[i], static_cast<int32_t>(static_cast<uint32_t>(v[i]) + 5u))
            << "k=" << k << " i=" << i;
      }
    }
  }
}

// Adding whole words adds every field at once, without carries, while the sums fit in k bits.
TEST(TernaryFields, WordSumsAddFieldsWithoutCarry) {
  const int n_total = 6, n = 1000;
  const int k = sum_field_bits(n_total);
  std::vector<uint64_t> sum(sum_field_words(n, k), 0);
  std::vector<int32_t> expected(n, 0);
  for (int w = 0; w < n_total; ++w) {
    std::vector<int32_t> codes(n);
    for (int i = 0; i < n; ++i) {
      codes[i] = static_cast<int32_t>(philox_word(3, w, i) % 3) - 1;
      expected[i] += codes[i];
    }
    std::vector<uint64_t> words(sum.size());
    pack_sum_fields_cpu(codes.data(), n, 1, k, words.data());
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += words[j];
  }
  std::vector<int32_t> acc(n, 0);
  unpack_sum_fields_accumulate_cpu(sum.data(), n, k, n_total, acc.data());
  EXPECT_EQ(acc, expected);
}

TEST(TernaryAlgorithmNames, ParseAndName) {
  for (const std::string& s : ternary_algorithm_names()) {
    EXPECT_EQ(name(parse_ternary_algorithm(s)), s);
  }
  EXPECT_EQ(parse_ternary_algorithm("packed_allreduce"), TernaryAlgorithm::packed_allreduce);
  try {
    parse_ternary_algorithm("ring");
    ADD_FAILURE() << "expected a throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'ring'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("packed-allreduce"), std::string::npos) << msg;
  }
}

TEST(TernaryCostModel, HandComputedFigures) {
  // n = 1000 two_bit: B = 250 bytes. P = 4, W = 2: N = 8, k = 5, f = 12, K = 8 * 84 = 672.
  const TernaryShape s{1000, 4, 2};
  const TernaryCost ps0 = ternary_cost(TernaryAlgorithm::ps, s, 0);
  EXPECT_EQ(ps0.rank.sent, 3u * 672);
  EXPECT_EQ(ps0.rank.received, 3u * 500);
  EXPECT_EQ(ps0.busiest, 3u * 672 + 3u * 500);
  const TernaryCost ps2 = ternary_cost(TernaryAlgorithm::ps, s, 2);
  EXPECT_EQ(ps2.rank.sent, 500u);
  EXPECT_EQ(ps2.rank.received, 672u);
  EXPECT_EQ(ps2.busiest, ps0.busiest);
  const TernaryCost ag = ternary_cost(TernaryAlgorithm::allgather, s, 1);
  EXPECT_EQ(ag.rank.sent, 3u * 500);
  EXPECT_EQ(ag.rank.received, 3u * 500);
  const TernaryCost pa = ternary_cost(TernaryAlgorithm::packed_allreduce, s, 3);
  EXPECT_EQ(pa.rank.sent, 2u * 3 * 672 / 4);
  EXPECT_EQ(pa.busiest, 2u * (2 * 3 * 672 / 4));
  EXPECT_EQ(choose_ternary_algorithm(s), TernaryAlgorithm::packed_allreduce);
  EXPECT_THROW(ternary_cost(TernaryAlgorithm::automatic, s, 0), Error);
  EXPECT_THROW(ternary_cost(TernaryAlgorithm::ps, s, 4), Error);
  EXPECT_THROW(ternary_cost(TernaryAlgorithm::ps, TernaryShape{-1, 2, 1}, 0), Error);
  EXPECT_THROW(ternary_cost(TernaryAlgorithm::ps, TernaryShape{10, 2, 0}, 0), Error);
}

TEST(TernaryCostModel, AutoPicksByBytes) {
  const int64_t n = 1 << 20;
  // The header's table (W = 1): allgather at P = 2 and 4, packed_allreduce from P = 8.
  EXPECT_EQ(choose_ternary_algorithm({n, 2, 1}), TernaryAlgorithm::allgather);
  EXPECT_EQ(choose_ternary_algorithm({n, 4, 1}), TernaryAlgorithm::allgather);
  EXPECT_EQ(choose_ternary_algorithm({n, 8, 1}), TernaryAlgorithm::packed_allreduce);
  EXPECT_EQ(choose_ternary_algorithm({n, 1, 3}), TernaryAlgorithm::allgather);  // all free
  // The choice is the minimum of the busiest-rank bytes.
  for (int p = 1; p <= 16; ++p) {
    for (int w = 1; w <= 8; w *= 2) {
      const TernaryShape s{12345, p, w};
      const TernaryAlgorithm c = choose_ternary_algorithm(s);
      for (TernaryAlgorithm a : {TernaryAlgorithm::ps, TernaryAlgorithm::allgather,
                                 TernaryAlgorithm::packed_allreduce}) {
        EXPECT_LE(ternary_cost(c, s, 0).busiest, ternary_cost(a, s, 0).busiest)
            << "P=" << p << " W=" << w << " " << name(a);
      }
    }
  }
}

// The main property: every algorithm, every shape, bit-identical and exact.
TEST(TernaryAggregate, AllAlgorithmsExactOnLocalGroups) {
  for (int p = 1; p <= 5; ++p) {
    for (int w = 1; w <= 3; ++w) {
      for (int64_t n : {0, 1, 63, 64, 65, 1000, 100003}) {
        const Problem pr = make_problem(p, w, n, PackFormat::two_bit);
        for (TernaryAlgorithm a :
             {TernaryAlgorithm::ps, TernaryAlgorithm::allgather, TernaryAlgorithm::packed_allreduce,
              TernaryAlgorithm::automatic}) {
          check_local(pr, a);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(TernaryAggregate, Base3CodesToo) {
  for (int p : {2, 3}) {
    const Problem pr = make_problem(p, 2, 1001, PackFormat::base3);
    for (TernaryAlgorithm a :
         {TernaryAlgorithm::ps, TernaryAlgorithm::allgather, TernaryAlgorithm::packed_allreduce}) {
      check_local(pr, a);
    }
  }
}

TEST(TernaryAggregate, RejectsBadArguments) {
  auto comms = make_local_group(1);
  std::vector<uint8_t> codes(4);
  std::vector<int32_t> acc(16);
  EXPECT_THROW(ternary_aggregate(*comms[0], TernaryAlgorithm::ps, codes.data(), 0, 16,
                                 PackFormat::two_bit, acc.data()),
               Error);
  EXPECT_THROW(ternary_aggregate(*comms[0], TernaryAlgorithm::ps, nullptr, 1, 16,
                                 PackFormat::two_bit, acc.data()),
               Error);
  EXPECT_THROW(ternary_aggregate(*comms[0], TernaryAlgorithm::ps, codes.data(), 1, -1,
                                 PackFormat::two_bit, acc.data()),
               Error);
}

// ---- buckets ----------------------------------------------------------------------------------

// S segments of the given sizes; rank r's W worker buckets; the expected accumulators per segment.
struct BucketProblem {
  int p, w;
  std::vector<int64_t> numel;
  PackFormat f;
  std::vector<std::vector<uint8_t>> rank_codes;          // [rank] = W buckets back to back
  std::vector<std::vector<int32_t>> baseline, expected;  // [segment]
};

BucketProblem make_bucket_problem(int p, int w, std::vector<int64_t> numel, PackFormat f) {
  BucketProblem pr{p, w, numel, f, std::vector<std::vector<uint8_t>>(p), {}, {}};
  for (size_t s = 0; s < numel.size(); ++s) {
    std::vector<int32_t> b(numel[s]);
    for (int64_t i = 0; i < numel[s]; ++i) b[i] = static_cast<int32_t>((i + s) % 5) - 2;
    pr.baseline.push_back(b);
    pr.expected.push_back(b);
  }
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < w; ++k) {
      const int64_t g = static_cast<int64_t>(r) * w + k;
      for (size_t s = 0; s < numel.size(); ++s) {
        // A different code vector per segment: offset the worker index.
        const std::vector<uint8_t> c = worker_codes(g + 100 * static_cast<int64_t>(s), numel[s], f);
        pr.rank_codes[r].insert(pr.rank_codes[r].end(), c.begin(), c.end());
        for (int64_t i = 0; i < numel[s]; ++i) pr.expected[s][i] += code_at(c, i, f);
      }
    }
  }
  return pr;
}

// overlap: each rank issues its chunks' collectives on a thread of its own.
void check_bucket(const BucketProblem& pr, TernaryAlgorithm algorithm, int64_t chunk_bytes,
                  bool overlap) {
  const std::string what = tg::detail::concat(
      name(algorithm), " P=", pr.p, " W=", pr.w, " S=", pr.numel.size(), " chunk ", chunk_bytes,
      overlap ? " overlap" : " serial", pr.f == PackFormat::base3 ? " base3" : " two_bit");
  auto comms = make_local_group(pr.p, 30s);
  std::vector<std::vector<std::vector<int32_t>>> accs(pr.p, pr.baseline);
  std::vector<TernaryResult> results(pr.p);
  const auto errors = run_ranks(pr.p, [&](int r) {
    std::vector<int32_t*> ptrs;
    for (auto& a : accs[r]) ptrs.push_back(a.data());
    WorkerThread collectives;
    const TernaryPipeline pipeline{chunk_bytes, overlap ? &collectives : nullptr};
    results[r] = ternary_aggregate_bucket(*comms[r], algorithm, pr.rank_codes[r].data(), pr.w,
                                          pr.numel, pr.f, ptrs, pipeline);
  });
  const TernaryBucketShape shape{pr.numel, pr.p, pr.w, pr.f, "local", chunk_bytes};
  const TernaryAlgorithm ran =
      algorithm == TernaryAlgorithm::automatic ? choose_ternary_bucket_algorithm(shape) : algorithm;
  for (int r = 0; r < pr.p; ++r) {
    ASSERT_EQ(errors[r], "") << what << " rank " << r;
    ASSERT_EQ(accs[r], pr.expected) << what << " rank " << r;
    EXPECT_EQ(results[r].algorithm, ran) << what;
    const TernaryCost cost = ternary_bucket_cost(ran, shape, r);
    EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << what << " rank " << r;
    EXPECT_EQ(results[r].wire.received, cost.rank.received) << what << " rank " << r;
  }
}

TEST(TernaryBucket, EveryAlgorithmChunkAndOverlapExactPerSegment) {
  // Odd sizes (codes end mid-byte), empty segments, one segment over many chunks.
  const std::vector<int64_t> numel = {1, 0, 7, 63, 64, 65, 0, 999, 5, 3001, 2};
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    for (int p : {1, 2, 3, 4}) {
      for (int w : {1, 2}) {
        const BucketProblem pr = make_bucket_problem(p, w, numel, f);
        for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{100}, int64_t{1} << 20})
          for (bool overlap : {false, true})
            for (TernaryAlgorithm a :
                 {TernaryAlgorithm::ps, TernaryAlgorithm::allgather,
                  TernaryAlgorithm::packed_allreduce, TernaryAlgorithm::automatic}) {
              check_bucket(pr, a, chunk, overlap);
              if (::testing::Test::HasFatalFailure()) return;
            }
      }
    }
  }
}

TEST(TernaryBucket, CostModelOfOneSegmentAndOfChunks) {
  for (int p : {2, 4, 8}) {
    for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
      const TernaryShape one{100003, p, 1, f, "local"};
      for (TernaryAlgorithm a : {TernaryAlgorithm::ps, TernaryAlgorithm::allgather,
                                 TernaryAlgorithm::packed_allreduce}) {
        // One segment, unchunked (or one chunk): the same figures as ternary_cost.
        for (int64_t chunk : {int64_t{0}, int64_t{1} << 20}) {
          const TernaryBucketShape b{{100003}, p, 1, f, "local", chunk};
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(ternary_bucket_cost(a, b, r).rank.sent, ternary_cost(a, one, r).rank.sent);
            EXPECT_EQ(ternary_bucket_cost(a, b, r).rank.received,
                      ternary_cost(a, one, r).rank.received);
          }
        }
      }
      // Chunked allgather moves the same bytes; packed fields at most one word more per piece.
      const TernaryBucketShape whole{{5000, 3, 70001}, p, 2, f, "local", 0};
      TernaryBucketShape chunked = whole;
      chunked.chunk_bytes = 1000;
      EXPECT_EQ(ternary_bucket_cost(TernaryAlgorithm::allgather, chunked, 0).busiest,
                ternary_bucket_cost(TernaryAlgorithm::allgather, whole, 0).busiest);
      EXPECT_EQ(bucket_code_bytes(whole.numel, f),
                static_cast<int64_t>(tern::packed_bytes(f, 5000) + tern::packed_bytes(f, 3) +
                                     tern::packed_bytes(f, 70001)));
      const uint64_t pa_whole =
          ternary_bucket_cost(TernaryAlgorithm::packed_allreduce, whole, 0).rank.sent;
      const uint64_t pa_chunked =
          ternary_bucket_cost(TernaryAlgorithm::packed_allreduce, chunked, 0).rank.sent;
      EXPECT_GE(pa_chunked, pa_whole);
      EXPECT_LE(pa_chunked, pa_whole + 2 * 8 * 2 * 100);  // <= 2 pieces per chunk, ~70 chunks
    }
  }
  EXPECT_THROW(ternary_bucket_cost(TernaryAlgorithm::ps, {{10, -1}, 2, 1}, 0), Error);
  TernaryBucketShape neg{{10}, 2, 1};
  neg.chunk_bytes = -5;
  EXPECT_THROW(ternary_bucket_cost(TernaryAlgorithm::ps, neg, 0), Error);
}

TEST(TernaryBucket, RejectsBadArguments) {
  auto comms = make_local_group(1);
  std::vector<uint8_t> codes(8);
  std::vector<int32_t> a(16), b(16);
  // One accumulator for two segments.
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], TernaryAlgorithm::ps, codes.data(), 1, {16, 16},
                                        PackFormat::two_bit, {a.data()}),
               Error);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], TernaryAlgorithm::ps, codes.data(), 1, {16, 16},
                                        PackFormat::two_bit, {a.data(), nullptr}),
               Error);
  EXPECT_NO_THROW(ternary_aggregate_bucket(*comms[0], TernaryAlgorithm::ps, codes.data(), 1,
                                           {16, 16}, PackFormat::two_bit, {a.data(), b.data()}));
}

// Over Gloo (TCP on 127.0.0.1, ranks as threads): same sums, and the wire bytes Gloo's schedules
// give (the cost model with backend "gloo").
TEST(TernaryAggregate, GlooMatchesItsCostModel) {
  testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  const int p = 3, w = 2;
  const Problem pr = make_problem(p, w, 5003, PackFormat::two_bit);
  int group = 0;
  for (TernaryAlgorithm a : {TernaryAlgorithm::ps, TernaryAlgorithm::allgather,
                             TernaryAlgorithm::packed_allreduce, TernaryAlgorithm::automatic}) {
    const std::string prefix = "ternary" + std::to_string(group++);
    std::vector<std::vector<int32_t>> accs(p, pr.baseline);
    std::vector<TernaryResult> results(p);
    const auto errors = run_ranks(p, [&](int r) {
      auto store = open_store(url, 20s);
      auto comm = make_communicator(gloo_loopback(r, p, 20s), *store, prefix);
      results[r] =
          ternary_aggregate(*comm, a, pr.rank_codes[r].data(), w, pr.n, pr.f, accs[r].data());
    });
    const TernaryShape shape{pr.n, p, w, pr.f, "gloo"};
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(errors[r], "") << name(a) << " rank " << r;
      EXPECT_EQ(accs[r], pr.expected) << name(a) << " rank " << r;
      const TernaryCost cost = ternary_cost(results[r].algorithm, shape, r);
      EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << name(a) << " rank " << r;
      EXPECT_EQ(results[r].wire.received, cost.rank.received) << name(a) << " rank " << r;
    }
  }
  // A bucket in chunks, collectives on the second thread, over TCP.
  const BucketProblem bp = make_bucket_problem(p, w, {5003, 17, 0, 20001}, PackFormat::base3);
  const int64_t chunk_bytes = 777;
  for (TernaryAlgorithm a :
       {TernaryAlgorithm::ps, TernaryAlgorithm::allgather, TernaryAlgorithm::packed_allreduce}) {
    const std::string prefix = "bucket" + std::to_string(group++);
    std::vector<std::vector<std::vector<int32_t>>> accs(p, bp.baseline);
    std::vector<TernaryResult> results(p);
    const auto errors = run_ranks(p, [&](int r) {
      auto store = open_store(url, 20s);
      auto comm = make_communicator(gloo_loopback(r, p, 20s), *store, prefix);
      std::vector<int32_t*> ptrs;
      for (auto& v : accs[r]) ptrs.push_back(v.data());
      WorkerThread collectives;
      results[r] = ternary_aggregate_bucket(*comm, a, bp.rank_codes[r].data(), w, bp.numel, bp.f,
                                            ptrs, {chunk_bytes, &collectives});
    });
    const TernaryBucketShape shape{bp.numel, p, w, bp.f, "gloo", chunk_bytes};
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(errors[r], "") << "bucket " << name(a) << " rank " << r;
      EXPECT_EQ(accs[r], bp.expected) << "bucket " << name(a) << " rank " << r;
      const TernaryCost cost = ternary_bucket_cost(a, shape, r);
      EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << "bucket " << name(a) << " rank " << r;
      EXPECT_EQ(results[r].wire.received, cost.rank.received) << "bucket " << name(a);
    }
  }
}

}  // namespace
}  // namespace tg::tern
