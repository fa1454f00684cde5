// Raw kernels of conv2d.h: 2-D convolution (cross-correlation, as in TensorFlow and cuDNN) as
// im2col + GEMM on a chunk of images at a time, CPU (OpenBLAS) and CUDA (cuBLAS).
//
// Letters: N batch, C input channels, H W input size, K output channels (filters), R S filter
// size, P Q output size, G groups (Cg = C/G input and Kg = K/G output channels per group).
// Layouts (all dense, row-major):  x [N, C, H, W]   w [K, Cg, R, S]   bias [K]   y [N, K, P, Q]
//
//   y[n,k,p,q] = bias[k] + sum_{c<Cg, r<R, s<S} w[k,c,r,s] * x[n, g*Cg + c, p*sh - pt + r, q*sw -
//   pl + s] with g = k / Kg and x read as 0 outside [0,H) x [0,W) (the padding).
//
// Chunking: nb = conv2d_chunk_images(s) images at a time. The workspace holds
//   col   [Cg*R*S, nb*P*Q]  the im2col matrix of one group of the chunk
//   stage [K,      nb*P*Q]  the chunk's output (or output gradient) in GEMM order
// so each GEMM has nb*P*Q columns (large even for small images).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tg {

struct Conv2dShape {
  int64_t N, C, H, W, K, R, S, P, Q, stride_h, stride_w, pad_top, pad_left, groups;
};

// Images per chunk: as many as fit ~8 MB of col + stage (cache-sized), raised so a GEMM has at
// least 4096 columns, capped at 64 MB; always in [1, N]. Both backends use the same chunks.
int64_t conv2d_chunk_images(const Conv2dShape& s);
// Floats of scratch the kernels need (col + stage of one chunk); callers allocate it on the
// kernel's device. Both backends use the same amount.
int64_t conv2d_workspace_floats(const Conv2dShape& s);
// Whether the CPU kernels of shape `s` use the caller's workspace: not when they run as tasks of
// whole image chunks per thread, each with its own scratch (enough images for 8 tasks); then
// callers allocate none.
bool conv2d_cpu_uses_workspace(const Conv2dShape& s);
// Test hook: caps the workspace budget (in floats) so that small shapes run in several chunks;
// 0 restores the default. Not thread-safe with concurrent convolutions; tests only.
void conv2d_set_workspace_budget_for_testing(int64_t floats);

// y = conv(x, w) + bias (bias nullable). Overwrites y.
void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                        float* y, float* workspace);
// dx = d(sum y*dy)/dx. Overwrites dx.
void conv2d_backward_data_cpu(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                              float* workspace);
// dw = d(sum y*dy)/dw, dbias[k] = sum_{n,p,q} dy[n,k,p,q]. Overwrites both; either may be null
// (not computed: a null dw skips the im2col and GEMMs).
void conv2d_backward_weight_cpu(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                float* dbias, float* workspace);

// ---- CUDA: algorithms, and the choice among them ---------------------------------------------
//
// Each pass of each shape runs one of these on the GPU (the CPU always runs im2col + OpenBLAS):
//   im2col              chunks of im2col + cuBLAS SGEMM (conv2d_cuda.cu)
//   igemm<BM>x<BN>[s<k>] implicit GEMM, BM x BN tiles, split-K in k pieces (conv2d_igemm.h)
//   igemm<BM>x<BN>[s<k>]_tf32  the same on tensor cores in TF32 (only where cuda.tf32 is on)
// Every one is deterministic (no float atomics; split-K pieces added in a fixed order), so a pass
// gives the same bits run to run once its algorithm is fixed; different algorithms differ in the
// last bits (different summation orders).
enum class Conv2dPass { forward, backward_data, backward_weight };
const char* conv2d_pass_name(Conv2dPass p);  // "fwd", "bwd_data", "bwd_weight"

struct Conv2dAlgo {
  enum Kind { im2col, igemm } kind = im2col;
  int bm = 0, bn = 0;  // igemm tile
  int splits = 1;      // igemm split-K pieces
  bool tf32 = false;   // igemm on tensor cores in TF32
  bool operator==(const Conv2dAlgo&) const = default;
};
std::string conv2d_algo_name(const Conv2dAlgo& a);
// Parses a name conv2d_algo_name gives; throws tg::Error naming `what` and the valid forms.
Conv2dAlgo parse_conv2d_algo(const std::string& name, const std::string& what);
// The igemm tiles there are kernels for: the fp32 ones, then (tf32) their TF32 twins.
std::vector<Conv2dAlgo> conv2d_igemm_tiles(bool tf32 = false);

// "N128 C3 H224 W224 K96 R11 S11 P56 Q56 s4x4 p3x3 g1 fwd" (s: strides, p: top and left
// padding): a pass of a shape, as summary.json and the cuda.conv_algorithms pins write it.
std::string conv2d_pass_key(const Conv2dShape& s, Conv2dPass p);

// How the GPU picks each pass's algorithm (config keys cuda.conv_algo, cuda.conv_algorithms):
//   mode "im2col"    im2col everywhere (the default until the GPU sweep's numbers say otherwise)
//   mode "igemm"     implicit GEMM everywhere, tile and split-K by conv2d_igemm_rule (its
//                    TF32 twin when cuda.tf32 is on)
//   mode "autotune"  the first time a pass of a shape runs, time im2col and every igemm tiling
//                    (with its rule's split; with cuda.tf32 on, the TF32 twins too) on it, keep
//                    the fastest (like cudnn.benchmark)
//   pins             pass key -> algorithm name, taking precedence over the mode: what a
//                    previous run's summary.json recorded, so the run can be redone bit for bit
//                    (a *_tf32 pin needs cuda.tf32 on)
struct Conv2dPolicy {
  std::string mode = "im2col";
  std::map<std::string, std::string> pins;
};
void set_conv2d_policy(const Conv2dPolicy& p);  // validates (throws naming the bad entry)
Conv2dPolicy conv2d_policy();
// Every (pass key, algorithm name) chosen since the policy was set, in first-use order.
std::vector<std::pair<std::string, std::string>> conv2d_choices();
size_t conv2d_choice_count();  // conv2d_choices().size(), without copying
// Records the choice for a pass of a shape (under conv2d_pass_key's name; the CUDA dispatcher
// calls it, tests may); the first one for a pass of a shape stays.
void note_conv2d_choice(const Conv2dShape& s, Conv2dPass p, const Conv2dAlgo& a);
// The choice recorded for the pass of the shape, if any: a hash lookup of the shape's numbers,
// no formatting (the dispatcher asks on every convolution).
bool find_conv2d_choice(const Conv2dShape& s, Conv2dPass p, Conv2dAlgo* out);

// The deterministic rule: the tile by the GEMM's M (the side the tile's rows cover) and the
// split by how many tiles the grid has, so small grids still fill the GPU; capped so the
// split-K partials fit `workspace_floats`.
// With tf32, the TF32 twin of the same tile and split.
Conv2dAlgo conv2d_igemm_rule(const Conv2dShape& s, Conv2dPass p, int64_t workspace_floats,
                             bool tf32 = false);
// The rule's split for a given tile (one of conv2d_igemm_tiles(); its precision kept).
Conv2dAlgo conv2d_igemm_split(const Conv2dShape& s, Conv2dPass p, const Conv2dAlgo& tile,
                              int64_t workspace_floats);
// The GEMM a pass is, as the implicit kernels see it (per group).
struct Conv2dGemmDims {
  int64_t m, n, k;
};
Conv2dGemmDims conv2d_gemm_dims(const Conv2dShape& s, Conv2dPass p);

// The same on CUDA: device pointers, on tg::cuda::current_stream() (asynchronous). The
// algorithm is the policy's (above); the *_with forms run the one given (benchmarks, tests).
void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                         float* y, float* workspace);
void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                               float* workspace);
void conv2d_backward_weight_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* dbias, float* workspace);
void conv2d_forward_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* x,
                              const float* w, const float* bias, float* y, float* workspace);
void conv2d_backward_data_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* dy,
                                    const float* w, float* dx, float* workspace);
void conv2d_backward_weight_cuda_with(const Conv2dAlgo& a, const Conv2dShape& s, const float* x,
                                      const float* dy, float* dw, float* dbias, float* workspace);

}  // namespace tg
