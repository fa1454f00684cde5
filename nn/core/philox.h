// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), one
// implementation compiled for host and device, so CPU and CUDA draw identical random streams.
//
// Keying used everywhere in terngrad:
//   key     = (seed_lo, seed_hi)                          one run-level 64-bit seed
//   counter = (block_lo, block_hi, stream_lo, stream_hi)  stream = what the numbers are for
// Element i of a stream uses 32-bit word i % 4 of block i / 4, so a kernel may hand any element
// range to any thread and still produce the same numbers as a sequential loop.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif

namespace tg {

struct Philox4 {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments

TG_HOST_DEVICE void round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}
}  // namespace philox_detail

// The raw 10-round bijection on a 128-bit counter under a 64-bit key.
TG_HOST_DEVICE Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  uint32_t k[2] = {key0, key1};
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += philox_detail::kW0;
      k[1] += philox_detail::kW1;
    }
    philox_detail::round(ctr.v, k);
  }
  return ctr;
}

// Block `block` of stream `stream` under `seed` (4 words = elements 4*block .. 4*block+3).
TG_HOST_DEVICE Philox4 philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  Philox4 c = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The 32-bit word of element i (sequential-loop code should prefer philox_block per 4 elements).
TG_HOST_DEVICE uint32_t philox_word(uint64_t seed, uint64_t stream, uint64_t i) {
  return philox_block(seed, stream, i >> 2).v[i & 3];
}

// Uniform float in [0, 1) from the top 24 bits: exactly representable, identical on host and
// device (no rounding-mode or fast-math dependence).
TG_HOST_DEVICE float uniform01(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// Uniform double in [0, 1) with 53 random bits from two words.
TG_HOST_DEVICE double uniform01_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// What a random stream is used for; part of the stream id so that, e.g., dropout of layer 3 and
// ternarization of tensor 3 never share numbers.
enum class RngPurpose : uint32_t {
  init = 1,
  dropout = 2,
  ternarize = 3,
  shuffle = 4,
  test = 5,
  data = 6
};

namespace philox_detail {
TG_HOST_DEVICE uint64_t mix64(uint64_t z) {  // splitmix64 finalizer: a bijection on 64 bits
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace philox_detail

// Stream id from (purpose, a, b, c), e.g. (ternarize, step, worker, tensor) or
// (dropout, layer, worker, step). Distinct tuples give distinct ids except with probability ~2^-64.
TG_HOST_DEVICE uint64_t rng_stream(RngPurpose purpose, uint64_t a = 0, uint64_t b = 0,
                                   uint64_t c = 0) {
  using philox_detail::mix64;
  uint64_t h = mix64(static_cast<uint64_t>(purpose) + 0x9E3779B97F4A7C15ULL);
  h = mix64(h ^ a);
  h = mix64((h + 0x632BE59BD9B4E019ULL) ^ b);
  h = mix64((h + 0x85157AF5ULL) ^ c);
  return h;
}

}  // namespace tg
