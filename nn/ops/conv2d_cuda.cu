// conv2d on CUDA: two algorithms per pass and the dispatch between them (conv2d_kernels.h).
//
// im2col: cuBLAS GEMM over chunks of nb images; mirrors conv2d_cpu.cpp step for step (same
// chunking, same workspace layout, same GEMMs). Layouts in conv2d_kernels.h.
//
//   im2col_kernel:  one thread per col element (row = (c*R + r)*S + s, column = i*PQ + p*Q + q);
//                   consecutive threads write consecutive columns (coalesced stores).
//   col2im_kernel:  one thread per dx element of the chunk and group: a gather that sums, in
//                   the CPU's (r, s) order, the col entries of every (r, s, p, q) that read the
//                   pixel. Each dx element has one owner: deterministic, no atomics, no zeroing.
//   scatter_kernel: one thread per y element of the chunk: y = stage + bias (in place when the
//                   GEMM wrote y directly: each thread reads and writes only its own element).
//   gather_kernel:  one thread per stage element: the chunk's dy in [K, nb*PQ] order.
//   dbias_kernel:   one block per output channel k, a fixed-order tree reduction over (n, p, q).
//
// igemm: the implicit-GEMM kernels of conv2d_igemm.h, one launch per pass (grid z = groups x
// split-K pieces) and, when split, one launch of the ordered reduction.
//
// Everything runs on cuda::current_stream().
#include <algorithm>
#include <limits>

#include "nn/core/blas.h"
#include "nn/core/cuda_check.cuh"
#include "nn/core/precision.h"
#include "nn/ops/conv2d_igemm.h"
#include "nn/ops/conv2d_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

#define TG_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

__global__ void im2col_kernel(Conv2dShape s, const float* __restrict__ x, int64_t n0, int64_t nb,
                              int64_t c0, float* __restrict__ col) {
  const int64_t Cg = s.C / s.groups, RS = s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, total = Cg * RS * ld;
  TG_GRID_STRIDE(idx, total) {
    const int64_t row = idx / ld, j = idx - row * ld;
    const int64_t i = j / PQ, pq = j - i * PQ;
    const int64_t p = pq / s.Q, q = pq - p * s.Q;
    const int64_t c = row / RS, rs = row - c * RS;
    const int64_t r = rs / s.S, sc = rs - r * s.S;
    const int64_t ih = p * s.stride_h - s.pad_top + r, iw = q * s.stride_w - s.pad_left + sc;
    float v = 0.0f;
    if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W)
      v = x[((n0 + i) * s.C + c0 + c) * HW + ih * s.W + iw];
    col[idx] = v;
  }
}

__global__ void col2im_kernel(Conv2dShape s, const float* __restrict__ col, int64_t n0, int64_t nb,
                              int64_t c0, float* __restrict__ dx) {
  const int64_t Cg = s.C / s.groups, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, total = nb * Cg * HW;
  TG_GRID_STRIDE(idx, total) {
    const int64_t ic = idx / HW, hw = idx - ic * HW;
    const int64_t i = ic / Cg, c = ic - i * Cg;
    const int64_t h = hw / s.W, w = hw - h * s.W;
    const float* src = col + c * s.R * s.S * ld + i * PQ;
    float sum = 0.0f;
    for (int64_t r = 0; r < s.R; ++r) {
      const int64_t th = h + s.pad_top - r;  // = p * stride_h for the p that reads (h, r)
      if (th < 0) break;                     // th only decreases with r
      if (th % s.stride_h != 0) continue;
      const int64_t p = th / s.stride_h;
      if (p >= s.P) continue;
      for (int64_t sc = 0; sc < s.S; ++sc) {
        const int64_t tw = w + s.pad_left - sc;
        if (tw < 0) break;
        if (tw % s.stride_w != 0) continue;
        const int64_t q = tw / s.stride_w;
        if (q >= s.Q) continue;
        sum += src[(r * s.S + sc) * ld + p * s.Q + q];
      }
    }
    dx[((n0 + i) * s.C + c0 + c) * HW + hw] = sum;
  }
}

// stage and y may alias (nb == 1): no __restrict__.
__global__ void scatter_kernel(Conv2dShape s, const float* stage, const float* bias, int64_t n0,
                               int64_t nb, float* y) {
  const int64_t PQ = s.P * s.Q, KPQ = s.K * PQ, ld = nb * PQ, total = nb * KPQ;
  TG_GRID_STRIDE(idx, total) {
    const int64_t i = idx / KPQ, kj = idx - i * KPQ;
    const int64_t k = kj / PQ, j = kj - k * PQ;
    const float b = bias ? bias[k] : 0.0f;
    y[n0 * KPQ + idx] = stage[k * ld + i * PQ + j] + b;
  }
}

__global__ void gather_kernel(Conv2dShape s, const float* __restrict__ dy, int64_t n0, int64_t nb,
                              float* __restrict__ stage) {
  const int64_t PQ = s.P * s.Q, ld = nb * PQ, total = s.K * ld;
  TG_GRID_STRIDE(idx, total) {
    const int64_t k = idx / ld, j = idx - k * ld;
    const int64_t i = j / PQ, pq = j - i * PQ;
    stage[idx] = dy[((n0 + i) * s.K + k) * PQ + pq];
  }
}

__global__ void dbias_kernel(Conv2dShape s, const float* __restrict__ dy,
                             float* __restrict__ dbias) {
  __shared__ float partial[kThreads];
  const int64_t k = blockIdx.x, PQ = s.P * s.Q, total = s.N * PQ;
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < total; e += kThreads) {
    const int64_t n = e / PQ, j = e - n * PQ;
    sum += dy[(n * s.K + k) * PQ + j];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[k] = partial[0];
}

void im2col(const Conv2dShape& s, const float* x, int64_t n0, int64_t nb, int64_t c0, float* col) {
  const int64_t total = s.C / s.groups * s.R * s.S * nb * s.P * s.Q;
  im2col_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, x, n0, nb, c0, col);
  TG_CUDA_LAUNCH_CHECK();
}

void col2im(const Conv2dShape& s, const float* col, int64_t n0, int64_t nb, int64_t c0, float* dx) {
  const int64_t total = nb * (s.C / s.groups) * s.H * s.W;
  col2im_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, col, n0, nb, c0, dx);
  TG_CUDA_LAUNCH_CHECK();
}

void scatter_output(const Conv2dShape& s, const float* stage, const float* bias, int64_t n0,
                    int64_t nb, float* y) {
  const int64_t total = nb * s.K * s.P * s.Q;
  if (stage == y + n0 * s.K * s.P * s.Q && bias == nullptr) return;  // GEMM wrote y, no bias
  scatter_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, stage, bias, n0, nb, y);
  TG_CUDA_LAUNCH_CHECK();
}

const float* chunk_dy(const Conv2dShape& s, const float* dy, int64_t n0, int64_t nb, float* stage) {
  if (nb == 1) return dy + n0 * s.K * s.P * s.Q;
  const int64_t total = s.K * nb * s.P * s.Q;
  gather_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, dy, n0, nb, stage);
  TG_CUDA_LAUNCH_CHECK();
  return stage;
}

void forward_im2col(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                    float* y, float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    float* out = nbc == 1 ? y + n0 * s.K * PQ : stage;  // one image: [K, PQ] is y itself
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cuda(dense_gemm(Trans::N, Trans::N, Kg, ld, CRS, 1.0f, w + g * Kg * CRS, col, 0.0f,
                           out + g * Kg * ld));
    }
    scatter_output(s, out, bias, n0, nbc, y);
  }
}

void backward_data_im2col(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                          float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    for (int64_t g = 0; g < G; ++g) {
      gemm_cuda(dense_gemm(Trans::T, Trans::N, CRS, ld, Kg, 1.0f, w + g * Kg * CRS,
                           g_out + g * Kg * ld, 0.0f, col));
      col2im(s, col, n0, nbc, g * (s.C / G), dx);
    }
  }
}

void bias_grad(const Conv2dShape& s, const float* dy, float* dbias) {
  dbias_kernel<<<static_cast<unsigned>(s.K), kThreads, 0, cuda::current_stream()>>>(s, dy, dbias);
  TG_CUDA_LAUNCH_CHECK();
}

void backward_weight_im2col(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                            float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = dw ? workspace + nb * CRS * PQ : nullptr;  // no workspace for dbias alone
  if (dw && s.N == 0) {                                     // no chunk to overwrite dw
    TG_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * s.K * CRS, cuda::current_stream()));
  }
  for (int64_t n0 = 0; dw && n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    const float beta = n0 == 0 ? 0.0f : 1.0f;  // the first chunk overwrites dw
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cuda(dense_gemm(Trans::N, Trans::T, Kg, CRS, ld, 1.0f, g_out + g * Kg * ld, col, beta,
                           dw + g * Kg * CRS));
    }
  }
}

// ---- implicit GEMM ------------------------------------------------------------------------------

template <class Tl, class Prob>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kMinBlocks)
    igemm_kernel(Prob pr, int splits, float* __restrict__ partial) {
  igemm::igemm_block<Tl>(pr, splits, partial, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
}

template <class Prob>
__global__ void igemm_reduce_kernel(Prob pr, int splits, const float* __restrict__ partial,
                                    int64_t total) {
  TG_GRID_STRIDE(e, total) igemm::igemm_reduce_element(pr, splits, partial, e);
}

template <class Tl, class Prob>
void launch_tile(const Prob& pr, int groups, int splits, float* partial) {
  const int64_t gx = (pr.N() + Tl::BN - 1) / Tl::BN, gy = (pr.M() + Tl::BM - 1) / Tl::BM;
  TG_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && int64_t{groups} * splits <= 65535,
           "conv2d igemm: grid ", gx, " x ", gy, " x ", groups * splits, " is too large");
  if (gx == 0 || gy == 0) return;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                  static_cast<unsigned>(groups * splits));
  igemm_kernel<Tl><<<grid, Tl::kThreads, 0, cuda::current_stream()>>>(pr, splits, partial);
  TG_CUDA_LAUNCH_CHECK();
}

template <class Prob>
void run_igemm(const Conv2dAlgo& a, const Prob& pr, int groups, float* workspace) {
  const int64_t total = int64_t{groups} * pr.M() * pr.N();
  float* partial = a.splits > 1 ? workspace : nullptr;
  igemm::with_tiling(a, [&]<class Tl>() { launch_tile<Tl>(pr, groups, a.splits, partial); });
  if (a.splits > 1 && total > 0) {
    igemm_reduce_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
        pr, a.splits, partial, total);
    TG_CUDA_LAUNCH_CHECK();
  }
}

// The implicit kernels index with 32-bit ints within an image and within w (images' offsets
// are 64-bit), with room for the rows and channels a tile or a cursor steps past the end.
void check_igemm(const Conv2dAlgo& a, const Conv2dShape& s, Conv2dPass p) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const Conv2dGemmDims g = conv2d_gemm_dims(s, p);
  const int64_t crs = s.C / s.groups * s.R * s.S, margin = 256;
  TG_CHECK(g.m <= kMax && g.n <= kMax && g.k <= kMax && (s.C + margin) * s.H * s.W <= kMax &&
               (s.K + margin) * s.P * s.Q <= kMax && (s.K + margin) * crs <= kMax,
           "conv2d ", conv2d_algo_name(a), ": shape ", conv2d_pass_key(s, p),
           " is too large for 32-bit indexing; use im2col");
  TG_CHECK(a.splits == 1 || s.groups * a.splits * g.m * g.n <= conv2d_workspace_floats(s),
           "conv2d ", conv2d_algo_name(a), ": split-K partials of ", conv2d_pass_key(s, p),
           " do not fit the workspace; use fewer splits");
}

}  // namespace

void conv2d_forward_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* x,
                              const float* w, const float* bias, float* y, float* workspace) {
  if (a.kind == Conv2dAlgo::im2col) return forward_im2col(s, x, w, bias, y, workspace);
  check_igemm(a, s, Conv2dPass::forward);
  run_igemm(a, igemm::Forward{igemm::dims_of(s), x, w, bias, y}, static_cast<int>(s.groups),
            workspace);
}

void conv2d_backward_data_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* dy,
                                    const float* w, float* dx, float* workspace) {
  if (a.kind == Conv2dAlgo::im2col) return backward_data_im2col(s, dy, w, dx, workspace);
  check_igemm(a, s, Conv2dPass::backward_data);
  run_igemm(a, igemm::BackwardData{igemm::dims_of(s), dy, w, dx}, static_cast<int>(s.groups),
            workspace);
}

void conv2d_backward_weight_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* x,
                                      const float* dy, float* dw, float* dbias, float* workspace) {
  if (dw && a.kind == Conv2dAlgo::im2col) backward_weight_im2col(s, x, dy, dw, workspace);
  if (dw && a.kind == Conv2dAlgo::igemm) {
    check_igemm(a, s, Conv2dPass::backward_weight);
    run_igemm(a, igemm::BackwardWeight{igemm::dims_of(s), x, dy, dw}, static_cast<int>(s.groups),
              workspace);
  }
  if (dbias) bias_grad(s, dy, dbias);
}

namespace {

// Times `run` (already warmed up once) on the current stream: the best of three, in ms.
template <class F>
float time_ms(F&& run) {
  cudaStream_t st = cuda::current_stream();
  cudaEvent_t a = nullptr, b = nullptr;
  TG_CUDA_CHECK(cudaEventCreate(&a));
  TG_CUDA_CHECK(cudaEventCreate(&b));
  run();
  float best = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 3; ++i) {
    TG_CUDA_CHECK(cudaEventRecord(a, st));
    run();
    TG_CUDA_CHECK(cudaEventRecord(b, st));
    TG_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    TG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms);
  }
  TG_CUDA_CHECK(cudaEventDestroy(a));
  TG_CUDA_CHECK(cudaEventDestroy(b));
  return best;
}

// The algorithm for a pass: the recorded choice, else a pin, else the policy's mode (autotune
// times the candidates with `run`, which must overwrite its outputs whole).
template <class Run>
Conv2dAlgo choose(const Conv2dShape& s, Conv2dPass p, Run&& run) {
  Conv2dAlgo a;
  if (find_conv2d_choice(s, p, &a)) return a;
  const std::string key = conv2d_pass_key(s, p);
  const Conv2dPolicy pol = conv2d_policy();
  const auto pin = pol.pins.find(key);
  const int64_t ws = conv2d_workspace_floats(s);
  if (pin != pol.pins.end()) {
    a = parse_conv2d_algo(pin->second, "cuda.conv_algorithms['" + key + "']");
  } else if (pol.mode == "igemm") {
    a = conv2d_igemm_rule(s, p, ws, cuda_tf32());
  } else if (pol.mode == "autotune") {
    std::vector<Conv2dAlgo> candidates{Conv2dAlgo{}};
    for (const Conv2dAlgo& t : conv2d_igemm_tiles(cuda_tf32()))
      candidates.push_back(conv2d_igemm_split(s, p, t, ws));
    float best = std::numeric_limits<float>::infinity();
    for (const Conv2dAlgo& c : candidates) {
      const float ms = time_ms([&] { run(c); });
      if (ms < best) best = ms, a = c;
    }
  }
  note_conv2d_choice(s, p, a);
  return a;
}

}  // namespace

void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                         float* y, float* workspace) {
  const auto run = [&](const Conv2dAlgo& a) {
    conv2d_forward_cuda_with(a, s, x, w, bias, y, workspace);
  };
  run(choose(s, Conv2dPass::forward, run));
}

void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                               float* workspace) {
  const auto run = [&](const Conv2dAlgo& a) {
    conv2d_backward_data_cuda_with(a, s, dy, w, dx, workspace);
  };
  run(choose(s, Conv2dPass::backward_data, run));
}

void conv2d_backward_weight_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* dbias, float* workspace) {
  if (dw) {
    const auto run = [&](const Conv2dAlgo& a) {
      conv2d_backward_weight_cuda_with(a, s, x, dy, dw, nullptr, workspace);
    };
    run(choose(s, Conv2dPass::backward_weight, run));
  }
  if (dbias) bias_grad(s, dy, dbias);
}

}  // namespace tg
