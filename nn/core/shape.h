// Shapes and strides. Letters used across nn/: N batch, C input channels, H W input height and
// width, K output channels (filters), R S filter height and width, P Q output height and width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
Shape contiguous_strides(const Shape& s);  // row-major, in elements
std::string shape_str(const Shape& s);     // "[64, 20, 14, 14]"

// Numpy-style broadcast of two shapes (aligned at the right); throws naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Up to this many dimensions are supported by the strided kernels (copy, broadcast).
inline constexpr int kMaxDims = 8;

}  // namespace tg
