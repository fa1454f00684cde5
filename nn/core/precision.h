// The GPU's fp32 math mode (config key cuda.tf32). Strict fp32 by default, as the paper's runs
// and the CPU; with TF32 on, cuBLAS's fp32 GEMMs (linear layers, im2col convolutions) may use
// tensor cores with 10-bit-mantissa inputs and fp32 accumulation (CUBLAS_TF32_TENSOR_OP_MATH, what
// PyTorch's allow_tf32 sets), and the implicit-GEMM convolutions run their tensor-core twins
// (nn/ops/conv2d_igemm.h, chosen per pass by the conv policy). The CPU ignores it. Process-wide;
// read on each GEMM and each convolution's first choice.
#pragma once

namespace tg {

void set_cuda_tf32(bool on);
bool cuda_tf32();

}  // namespace tg
