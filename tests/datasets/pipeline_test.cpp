// The input pipeline (datasets/pipeline.h): for every dataset kind (MNIST's real files, CIFAR-10
// and an image folder written here in their real formats, synthetic), augmentation on, the
// batches it serves are the bytes of loading each worker's slice directly, for every thread count
// and depth; errors reach the step that needed the example; steps asked out of order work.
#include "datasets/pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "datasets/sampler.h"
#include "datasets/synthetic_folder.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {

using tg::testing::TempDir;

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";

void write_cifar(const std::string& dir) {
  for (int f = 0; f <= 5; ++f) {
    std::vector<uint8_t> b;
    for (int r = 0; r < 20; ++r) {
      b.push_back(static_cast<uint8_t>((f * 20 + r) % 10));
      for (int i = 0; i < 3072; ++i)
        b.push_back(static_cast<uint8_t>(philox_word(7, f * 20 + r, i)));
    }
    tg::testing::write_bytes(
        dir + (f < 5 ? "/data_batch_" + std::to_string(f + 1) : "/test_batch") + ".bin", b);
  }
}

struct Kind {
  std::string label;
  DataOptions options;
};

std::vector<Kind> kinds(const TempDir& dir) {
  std::vector<Kind> out;
  DataOptions mnist;
  mnist.name = "mnist";
  mnist.path = kMnist;
  out.push_back({"mnist", mnist});
  write_cifar(dir / "cifar");
  DataOptions cifar;
  cifar.name = "cifar10";
  cifar.path = dir / "cifar";
  out.push_back({"cifar10", cifar});
  SyntheticFolderOptions f;
  f.classes = 3;
  f.train_per_class = 8;
  f.val_per_class = 1;
  f.width = 72;
  f.height = 56;
  write_synthetic_folder(dir / "folder", f);
  for (Preprocess p : {Preprocess::alexnet, Preprocess::inception}) {
    DataOptions folder;
    folder.name = "image-folder";
    folder.path = dir / "folder";
    folder.preprocess = p;
    folder.image_size = 32;
    out.push_back({"image-folder " + std::string(enum_name(kPreprocesses, p)), folder});
  }
  DataOptions synth;
  synth.name = "synthetic";
  synth.synthetic_size = 100;
  out.push_back({"synthetic", synth});
  return out;
}

constexpr int kWorkers = 2;
constexpr int64_t kBatch = 12;

BatchPipeline::Plan plan_for(const BatchSampler& sampler) {
  return [&sampler](int64_t step) {
    std::vector<BatchRequest> r;
    for (int w = 0; w < kWorkers; ++w)
      r.push_back({sampler.indices(step, w, kWorkers), sampler.first_position(step, w, kWorkers)});
    return r;
  };
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(BatchPipeline, SameBytesForEveryThreadCountAndDepth) {
  ASSERT_TRUE(std::filesystem::exists(kMnist)) << "MNIST missing at " << kMnist;
  TempDir dir;
  constexpr uint64_t kSeed = 77;
  constexpr int64_t kSteps = 5;
  for (const Kind& k : kinds(dir)) {
    SCOPED_TRACE(k.label);
    const auto ds = open_dataset(k.options, Split::train);
    const BatchSampler sampler(ds->info().size, kBatch, kSeed);
    // The reference: each worker's slice loaded in one call, as the trainer did before.
    std::vector<std::vector<HostBatch>> want;
    for (int64_t s = 0; s < kSteps; ++s) {
      want.emplace_back();
      for (const BatchRequest& r : plan_for(sampler)(s)) {
        const int64_t n = static_cast<int64_t>(r.indices.size());
        const DatasetInfo& in = ds->info();
        HostBatch b{Tensor::empty({n, in.channels, in.height, in.width}),
                    Tensor::empty({n}, DType::i32)};
        ds->load(r.indices, true, kSeed, r.key_base, b.x.data<float>(), b.y.data<int32_t>());
        want.back().push_back(std::move(b));
      }
    }
    for (int threads : {1, 2, 3, 7}) {
      for (int depth : {0, 1, 3}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + ", depth " + std::to_string(depth));
        BatchPipeline p(*ds, plan_for(sampler), {threads, depth, true, kSeed});
        EXPECT_EQ(p.threads(), threads);
        for (int64_t s = 0; s < kSteps; ++s) {
          const std::vector<HostBatch> got = p.get(s, kSteps);
          ASSERT_EQ(got.size(), static_cast<size_t>(kWorkers));
          for (int w = 0; w < kWorkers; ++w) {
            EXPECT_TRUE(same_bytes(got[w].x, want[s][w].x)) << "step " << s << " worker " << w;
            EXPECT_TRUE(same_bytes(got[w].y, want[s][w].y)) << "step " << s << " worker " << w;
          }
        }
      }
    }
  }
}

// A dataset whose example 13 is a bad file, and which counts its loads.
class Flaky final : public Dataset {
 public:
  Flaky() {
    info_.name = "flaky";
    info_.size = 40;
    info_.channels = info_.height = info_.width = 1;
    info_.num_classes = 2;
  }
  void load(std::span<const int64_t> indices, bool, uint64_t, uint64_t key_base, float* images,
            int32_t* labels) const override {
    for (size_t i = 0; i < indices.size(); ++i) {
      if (indices[i] == 13) TG_THROW("flaky/13.jpg: corrupt JPEG data");
      images[i] = static_cast<float>(indices[i]) + 1000.0f * static_cast<float>(key_base + i);
      labels[i] = static_cast<int32_t>(indices[i] % 2);
      uint64_t seen = last_key.load();
      while (key_base + i > seen && !last_key.compare_exchange_weak(seen, key_base + i)) {
      }
    }
  }
  mutable std::atomic<uint64_t> last_key{0};  // the largest stream position loaded
};

BatchPipeline::Plan unshuffled(int64_t batch) {
  return [batch](int64_t step) {
    BatchRequest r;
    for (int64_t i = 0; i < batch; ++i) r.indices.push_back((step * batch + i) % 40);
    r.key_base = static_cast<uint64_t>(step * batch);
    return std::vector<BatchRequest>{r};
  };
}

// PipelineOptions::allocate: the batches are written into the memory it hands out (a CUDA run's
// page-locked blocks; here blocks the test owns, kept alive by the tensors), with the same bytes.
TEST(BatchPipeline, BatchesLandInTheAllocatorsMemory) {
  Flaky ds;
  std::vector<std::weak_ptr<void>> blocks;
  std::vector<const void*> addresses;
  PipelineOptions o{2, 1, false, 5};
  o.allocate = [&](const Shape& shape, DType dtype) {
    size_t bytes = element_size(dtype);
    for (int64_t d : shape) bytes *= static_cast<size_t>(d);
    std::shared_ptr<void> block(::operator new(bytes), [](void* p) { ::operator delete(p); });
    blocks.push_back(block);
    addresses.push_back(block.get());
    return Tensor::from_owner(block, shape, dtype, Device::cpu());
  };
  BatchPipeline plain(ds, unshuffled(4), {2, 1, false, 5});
  {
    BatchPipeline p(ds, unshuffled(4), o);
    for (int64_t s = 0; s < 3; ++s) {
      const std::vector<HostBatch> got = p.get(s, 3), want = plain.get(s, 3);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_TRUE(same_bytes(got[0].x, want[0].x)) << s;
      EXPECT_TRUE(same_bytes(got[0].y, want[0].y)) << s;
      EXPECT_NE(std::find(addresses.begin(), addresses.end(), got[0].x.raw_data()),
                addresses.end());
      EXPECT_NE(std::find(addresses.begin(), addresses.end(), got[0].y.raw_data()),
                addresses.end());
    }
  }
  // Every block is released once the pipeline and the batches are gone.
  for (const auto& b : blocks) EXPECT_TRUE(b.expired());
}

TEST(BatchPipeline, AnErrorReachesTheStepThatNeededTheExample) {
  Flaky ds;
  BatchPipeline p(ds, unshuffled(4), {3, 2, false, 0});
  for (int64_t s = 0; s < 3; ++s) {
    const auto got = p.get(s, 10);
    EXPECT_EQ(got[0].x.data<float>()[1], static_cast<float>(4 * s + 1) + 1000.0f * (4 * s + 1));
  }
  // Step 3 holds example 13: its error, naming the file, comes from get(3) and no earlier.
  tg::testing::expect_error_with([&] { p.get(3, 10); }, {"flaky/13.jpg: corrupt JPEG data"});
  // The pipeline goes on with later steps.
  EXPECT_EQ(p.get(4, 10)[0].y.data<int32_t>()[0], 0);
}

TEST(BatchPipeline, StepsOutOfOrderAndAnEarlyEndAreServed) {
  Flaky ds;
  BatchPipeline p(ds, unshuffled(2), {2, 3, false, 0});
  EXPECT_EQ(p.get(5, 8)[0].x.data<float>()[0], 10.0f + 10000.0f);
  EXPECT_EQ(p.get(2, 8)[0].x.data<float>()[0], 4.0f + 4000.0f);  // behind the queued ones
  EXPECT_EQ(p.get(7, 8)[0].x.data<float>()[1], 15.0f + 15000.0f);
  // Nothing at or beyond `end` (step 8: positions 16, 17) is ever loaded.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds.last_key.load(), 15u);
}

TEST(BatchPipeline, DestroyedWithWorkQueuedReturns) {
  Flaky ds;
  const auto t0 = std::chrono::steady_clock::now();
  {
    BatchPipeline p(ds, unshuffled(3), {2, 100, false, 0});
    p.get(0, 1000);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(BatchPipeline, BadOptionsAreRefused) {
  Flaky ds;
  tg::testing::expect_error_with(
      [&] {
        BatchPipeline(ds, unshuffled(1), {0, 1, false, 0});
      },
      {"threads = 0"});
  tg::testing::expect_error_with(
      [&] {
        BatchPipeline(ds, unshuffled(1), {1, -1, false, 0});
      },
      {"depth = -1"});
}

}  // namespace
}  // namespace tg::data
