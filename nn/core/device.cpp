#include "nn/core/device.h"

#include <charconv>
#include <cstring>
#include <fstream>

#include "nn/core/cuda_runtime.h"
#include "nn/core/dtype.h"
#include "nn/core/error.h"

namespace tg {

void copy_bytes(const Device& d, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (d.is_cpu())
    std::memcpy(dst, src, n);
  else
    cuda::copy_d2d(d.index, dst, src, n);
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.starts_with("cuda:")) {
    std::string_view num = s.substr(5);
    int idx = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), idx);
    if (ec == std::errc() && p == num.data() + num.size() && idx >= 0) return Device::cuda(idx);
  }
  TG_THROW("unknown device '", s, "': expected 'cpu', 'cuda' or 'cuda:N'");
}

void check_device_usable(const Device& d) {
  if (d.is_cpu()) return;
  TG_CHECK(TG_CUDA, "device ", d.str(), " requested, but terngrad was built without CUDA ",
           "(configure with -DTG_ENABLE_CUDA=ON on a machine with the CUDA toolkit)");
  int n = cuda::device_count();
  TG_CHECK(n > 0, "device ", d.str(), " requested, but no CUDA device is available (",
           cuda::unavailable_reason(), ")");
  TG_CHECK(d.index < n, "device ", d.str(), " requested, but only ", n,
           " CUDA device(s) are present");
}

DType parse_dtype(std::string_view s) {
  for (DType t : {DType::f32, DType::i8, DType::u8, DType::i32, DType::i64, DType::u64})
    if (dtype_name(t) == s) return t;
  TG_THROW("unknown dtype '", s, "': expected one of f32, i8, u8, i32, i64, u64");
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

}  // namespace tg
