// [cuda]: how the GPU computes (config keys cuda.*; the CPU ignores them). They change the last
// bits of a GPU run's numbers, never what is computed, so, like `device`, a resumed run may set
// them differently.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tg {

struct CudaOptions {
  // How each convolution pass picks its algorithm: im2col, igemm or autotune (conv2d_kernels.h).
  std::string conv_algo = "im2col";
  // Pins, "<pass key>=<algorithm>; ...": what a run's summary.json reported as
  // conv_algorithms_pins, to redo it bit for bit. Empty = none.
  std::string conv_algorithms;
  bool tf32 = false;  // TF32 tensor-core math for fp32 GEMMs and convs (nn/core/precision.h)
  bool operator==(const CudaOptions&) const = default;
};

// Checks the pins parse and that a TF32 pin comes with cuda.tf32 on; throws tg::Error naming the
// bad entry.
void check_cuda_options(const CudaOptions& o);
// Sets the process's conv policy and TF32 mode; throws tg::Error naming the bad key or entry.
void apply_cuda_options(const CudaOptions& o);

// The pins string of conv_algorithms for a list of (pass key, algorithm), and back (throws
// naming the malformed entry).
std::string conv2d_pins_string(const std::vector<std::pair<std::string, std::string>>& choices);
std::vector<std::pair<std::string, std::string>> parse_conv2d_pins(const std::string& pins);

}  // namespace tg
