#include "nn/core/tensor.h"

#include <cstring>

#include "nn/core/allocator.h"
#include "nn/core/cuda_runtime.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_THROW(parse_device("cuda:-1"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
}

TEST(Device, ZeroGpusIsNormal) {
  // Never throws, whatever the machine; without a GPU it is 0 and cuda tensors are refused
  // with a message that says why.
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda::unavailable_reason().empty());
    try {
      Tensor::empty({2}, DType::f32, Device::cuda(0));
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  } else {
    EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda(n)), Error);
  }
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(element_size(DType::f32), 4u);
  EXPECT_EQ(element_size(DType::i8), 1u);
  EXPECT_EQ(element_size(DType::u8), 1u);
  EXPECT_EQ(element_size(DType::i32), 4u);
  EXPECT_EQ(element_size(DType::i64), 8u);
  EXPECT_EQ(element_size(DType::u64), 8u);
  EXPECT_EQ(parse_dtype("u64"), DType::u64);
  EXPECT_THROW(parse_dtype("f16"), Error);
}

TEST(Tensor, FactoriesAndAccess) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 1.5f);
  EXPECT_THROW(t.data<int32_t>(), Error);
  Tensor i = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(i.item<int32_t>(), Error) << "item on a multi-element tensor must throw";
  EXPECT_EQ(i.slice(0, 1, 2).slice(1, 1, 2).item<int32_t>(), 4);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = t.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_TRUE(v.shares_storage_with(t));
  Tensor s = t.slice(1, 1, 3);  // [[1,2],[4,5]]
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_THROW(s.view({4}), Error);
  s.fill_(9);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 9, 9, 3, 9, 9}));
  Tensor c = s.contiguous();
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_THROW(t.view({4, 2}), Error);
  EXPECT_THROW(t.slice(0, 1, 3), Error);
}

TEST(Tensor, BorrowUsesTheCallersMemoryAndFreesNothing) {
  std::vector<float> mine = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::borrow(mine.data(), {2, 3}, DType::f32, Device::cpu());
    EXPECT_EQ(t.data<float>(), mine.data());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<float>(), mine);
    t.slice(1, 1, 2).fill_(7);  // writes land in the caller's memory
    Tensor v = t.view({6});
    EXPECT_TRUE(v.shares_storage_with(t));
  }
  // Both handles are gone; the memory is still ours (ASan would flag a free of a vector's
  // buffer) and holds the writes.
  EXPECT_EQ(mine, (std::vector<float>{1, 7, 3, 4, 7, 6}));
  EXPECT_TRUE(Tensor::borrow(nullptr, {0, 4}, DType::f32, Device::cpu()).defined());
  EXPECT_THROW(Tensor::borrow(nullptr, {2}, DType::f32, Device::cpu()), Error);
  EXPECT_THROW(Tensor::borrow(mine.data(), {-1}, DType::f32, Device::cpu()), Error);
}

TEST(Tensor, StridedCopyAllDtypes) {
  for (DType dt : {DType::f32, DType::i8, DType::u8, DType::i32, DType::i64, DType::u64}) {
    Tensor src = Tensor::empty({3, 4}, dt);
    // Fill by rows with distinct values through fill_ on row views.
    for (int r = 0; r < 3; ++r) src.slice(0, r, r + 1).fill_(r + 1);
    Tensor dst = Tensor::zeros({3, 2}, dt);
    dst.copy_from(src.slice(1, 1, 3));
    Tensor expect = Tensor::empty({3, 2}, dt);
    for (int r = 0; r < 3; ++r) expect.slice(0, r, r + 1).fill_(r + 1);
    Tensor db = dst.view({6}), eb = expect.view({6});
    for (int k = 0; k < 6; ++k) {
      // Compare raw bytes element by element through 1-element views.
      EXPECT_EQ(std::memcmp(db.slice(0, k, k + 1).raw_data(), eb.slice(0, k, k + 1).raw_data(),
                            element_size(dt)),
                0)
          << dtype_name(dt) << " element " << k;
    }
  }
  Tensor a = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::zeros({2, 2}, DType::i64);
  b.copy_from(a.slice(1, 0, 2));
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_THROW(b.copy_from(a), Error);
}

TEST(Tensor, ZeroSizeIsContiguous) {
  Tensor t = Tensor::empty({2, 0, 3});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.view({0, 5}).numel(), 0);
  t.fill_(1.0);  // nothing to do, must not throw
}

TEST(Tensor, ToSameDeviceIsIdentity) {
  Tensor t = Tensor::zeros({4});
  EXPECT_TRUE(t.to(Device::cpu()).shares_storage_with(t));
}

TEST(Allocator, CachesBlocks) {
  CachingAllocator a(Device::cpu());
  void* p = a.allocate(1000);
  a.deallocate(p);
  void* q = a.allocate(900);  // same 1024-byte class
  EXPECT_EQ(p, q);
  auto s = a.stats();
  EXPECT_EQ(s.raw_allocs, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.in_use_bytes, 1024u);
  a.deallocate(q);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size((1 << 20) + 1), 2u << 20);
  EXPECT_THROW(a.deallocate(reinterpret_cast<void*>(0x1000)), Error);
}

}  // namespace
}  // namespace tg
