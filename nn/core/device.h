// Devices: the CPU, or CUDA device i. Moving data between devices is always explicit
// (Tensor::to); nothing in the library copies behind the caller's back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tg {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda", "cuda:N". Throws on anything else. Does not check that the device exists.
Device parse_device(std::string_view s);

// Throws a clear error if `d` cannot be used in this process: CUDA asked for in a build without
// CUDA, no CUDA device present, or index out of range.
void check_device_usable(const Device& d);

// n raw bytes from src to dst, both on device d (host memory for the CPU): memcpy, or a
// device-to-device copy on d's current stream. The one byte copy of the exchange and the
// compressors, for buffers that are not tensors. Throws for CUDA in a build without CUDA.
void copy_bytes(const Device& d, void* dst, const void* src, size_t n);

// The host CPU's model name from /proc/cpuinfo ("AMD EPYC ..."), or "unknown".
std::string cpu_model_name();

}  // namespace tg
