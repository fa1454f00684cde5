// Compressor state in checkpoints (train/checkpoint.h): each worker's Compressor::state saved as
// "compressor/worker<w>/<name>" survives the file round trip and restores a compressor that
// continues bit-identically; checkpoints of stateless methods carry nothing (older files load);
// and every mismatch (worker count, gaps, malformed names, wrong shapes, state a run cannot take,
// a stateful method's state missing) is refused naming the file and what is wrong.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "nn/core/hash.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "terngrad/compressor.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::testing {
namespace {

using train::Checkpoint;

std::vector<tern::GradSlot> layout() {
  return {{"w", 0, 300}, {"b", 300, 12}};
}
constexpr int64_t kTotal = 312;

std::unique_ptr<tern::Compressor> make(const std::string& method) {
  tern::CompressionOptions o;
  o.method = parse_enum(tern::kMethods, method, "method");
  return tern::make_compressor(o, layout());
}

// Runs rounds 1-2 (shared meta, encode) for `steps` steps of `workers` workers' gradients;
// returns the last step's messages.
std::vector<std::vector<uint8_t>> encode_steps(tern::Compressor& c, int workers, int64_t first,
                                               int64_t steps) {
  std::vector<std::vector<uint8_t>> msgs;
  for (int64_t step = first; step < first + steps; ++step) {
    msgs.clear();
    std::vector<Tensor> g;
    std::vector<float> shared(static_cast<size_t>(c.num_meta()), 0.0f), meta(shared.size());
    for (int w = 0; w < workers; ++w) {
      g.push_back(Tensor::empty({kTotal}));
      init::normal_(g[w], 0.0f, 1.0f, 9,
                    rng_stream(RngPurpose::test, static_cast<uint64_t>(step), w));
      c.local_meta(g[w], meta.data());
      for (size_t i = 0; i < meta.size(); ++i)
        shared[i] = w == 0 ? meta[i] : std::max(shared[i], meta[i]);
    }
    Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step))}, DType::u8);
    for (int w = 0; w < workers; ++w) {
      c.encode(g[w], shared.data(), step, w, msg);
      msgs.emplace_back(msg.data<uint8_t>(), msg.data<uint8_t>() + msg.numel());
    }
  }
  return msgs;
}

Checkpoint with_state(const tern::Compressor& c, int workers) {
  Checkpoint ck;
  ck.source = "run/checkpoint.tgckpt";
  ck.tensors.emplace_back("params", Tensor::zeros({4}));
  train::add_compressor_state(ck, c, workers);
  return ck;
}

TEST(CheckpointCompressorState, OnebitResidualsSurviveTheFileAndContinueBitIdentically) {
  TempDir dir;
  auto a = make("onebit");
  encode_steps(*a, 2, 0, 3);
  Checkpoint ck = with_state(*a, 2);
  EXPECT_TRUE(ck.has("compressor/worker0/residual"));
  EXPECT_TRUE(ck.has("compressor/worker1/residual"));
  EXPECT_FALSE(ck.has("compressor/worker2/residual"));
  EXPECT_EQ(train::compressor_state_key(1, "residual"), "compressor/worker1/residual");
  train::save_checkpoint(dir / "c.tgckpt", ck);
  const Checkpoint back = train::load_checkpoint(dir / "c.tgckpt");
  EXPECT_EQ(back.get("compressor/worker1/residual").shape(), Shape({kTotal}));

  auto b = make("onebit");
  train::load_compressor_state(back, b.get(), 2);
  EXPECT_EQ(encode_steps(*a, 2, 3, 2), encode_steps(*b, 2, 3, 2));
}

TEST(CheckpointCompressorState, StatelessMethodsWriteNothingAndOlderCheckpointsLoad) {
  for (const std::string method : {"none", "fp16", "terngrad", "qsgd"}) {
    auto c = make(method);
    encode_steps(*c, 3, 0, 1);
    Checkpoint ck = with_state(*c, 3);
    EXPECT_EQ(ck.tensors.size(), 1u) << method;
    train::load_compressor_state(ck, c.get(), 3);  // no entries: fine
  }
  Checkpoint plain;
  train::load_compressor_state(plain, nullptr, 1);  // one worker, no compressor
}

TEST(CheckpointCompressorState, MismatchesAreRefusedNamingFileAndCulprit) {
  auto src = make("onebit");
  encode_steps(*src, 4, 0, 1);
  const Checkpoint four = with_state(*src, 4);
  auto c = make("onebit");
  // The checkpoint has 4 workers' residuals, the config 2 (and the other way round).
  expect_error_with(
      [&] { train::load_compressor_state(four, c.get(), 2); },
      {"run/checkpoint.tgckpt", "onebit", "state for 4 worker(s)", "config has 2 worker(s)"});
  const Checkpoint two = with_state(*src, 2);
  expect_error_with([&] { train::load_compressor_state(two, c.get(), 4); },
                    {"state for 2 worker(s)", "config has 4 worker(s)"});
  // State while the run has no compressor; state a stateless method cannot take.
  expect_error_with([&] { train::load_compressor_state(two, nullptr, 1); },
                    {"run/checkpoint.tgckpt", "2 worker(s)", "no compressor"});
  expect_error_with([&] { train::load_compressor_state(two, make("terngrad").get(), 2); },
                    {"worker 0", "terngrad", "keeps no state", "'residual'"});
  // A onebit checkpoint without state (written before it was saved) is not silently zeroed.
  Checkpoint old;
  old.source = "old.tgckpt";
  expect_error_with([&] { train::load_compressor_state(old, c.get(), 2); },
                    {"old.tgckpt", "worker 0", "missing entry 'residual'", "older terngrad"});
  // A residual of another size (another net).
  Checkpoint bad = two;
  bad.tensors.back().second = Tensor::zeros({kTotal + 5});
  expect_error_with([&] { train::load_compressor_state(bad, c.get(), 2); },
                    {"worker 1", "f32 [312]", "[317]"});
  // Gaps and malformed names.
  Checkpoint gap;
  gap.tensors.emplace_back("compressor/worker0/residual", Tensor::zeros({kTotal}));
  gap.tensors.emplace_back("compressor/worker2/residual", Tensor::zeros({kTotal}));
  expect_error_with([&] { train::load_compressor_state(gap, c.get(), 2); },
                    {"worker 2", "no worker 1"});
  for (const std::string key :
       {"compressor/residual", "compressor/worker/residual", "compressor/worker01/residual",
        "compressor/workerx/residual", "compressor/worker0/", "compressor/worker0"}) {
    Checkpoint m;
    m.tensors.emplace_back(key, Tensor::zeros({kTotal}));
    expect_error_with([&] { train::load_compressor_state(m, c.get(), 1); },
                      {"malformed compressor state entry '" + key + "'"});
  }
}

// A checkpoint's bytes from its header JSON and payload, with the SHA-256 it ends with, so the
// parser is reached.
std::string checkpoint_bytes(const std::string& header, size_t payload_bytes) {
  std::string b("TGCKPT\0\1", 8);
  const uint64_t hlen = header.size();
  b.append(reinterpret_cast<const char*>(&hlen), sizeof(hlen));
  b += header;
  b.append(payload_bytes, '\0');
  return b + sha256_hex(b.data(), b.size());
}

std::string one_tensor(const std::string& shape, const std::string& offset,
                       const std::string& nbytes) {
  return R"({"step":1,"net":"lenet","config_toml":"","tensors":[{"name":"fc1/w","dtype":"f32",)"
         R"("shape":)" +
         shape + R"(,"offset":)" + offset + R"(,"nbytes":)" + nbytes + "}]}";
}

// Issue 15: offsets whose bounds check wrapped around in unsigned arithmetic (a crash, or
// parameters read from the wrong bytes), shapes whose element count overflows, and numbers that
// are not integers are refused naming the file and the tensor.
TEST(CheckpointParse, HostileOffsetsAndShapesAreRefused) {
  const std::string f = "hostile.tgckpt";
  // offset + nbytes = 2^64 + 2048: wraps to 2048, inside the 4096-byte payload.
  expect_error_with(
      [&] {
        train::parse_checkpoint(
            checkpoint_bytes(
                one_tensor("[2305843009213694464]", "9223372036854775808", "9223372036854777856"),
                4096),
            f);
      },
      {f, "corrupt checkpoint", "tensor 'fc1/w'", "lies outside"});
  // The same wrap with an offset alone past the end.
  expect_error_with(
      [&] {
        train::parse_checkpoint(
            checkpoint_bytes(one_tensor("[4]", "18446744073709549568", "16"), 64), f);
      },
      {f, "tensor 'fc1/w'", "lies outside"});
  // 2^40 x 2^40 elements overflow int64.
  expect_error_with(
      [&] {
        train::parse_checkpoint(
            checkpoint_bytes(one_tensor("[1099511627776,1099511627776]", "0", "0"), 64), f);
      },
      {f, "tensor 'fc1/w'", "int64"});
  // 2^65 elements: the element count overflows.
  expect_error_with(
      [&] {
        train::parse_checkpoint(
            checkpoint_bytes(one_tensor("[4611686018427387904,8]", "0", "0"), 64), f);
      },
      {f, "tensor 'fc1/w'"});
  expect_error_with(
      [&] { train::parse_checkpoint(checkpoint_bytes(one_tensor("[4]", "0.5", "16"), 64), f); },
      {f, "tensor 'fc1/w' offset", "not an integer"});
  expect_error_with(
      [&] { train::parse_checkpoint(checkpoint_bytes(one_tensor("[4]", "-16", "16"), 64), f); },
      {f, "tensor 'fc1/w' offset", "out of range"});
  expect_error_with(
      [&] { train::parse_checkpoint(checkpoint_bytes(one_tensor("[-4]", "0", "16"), 64), f); },
      {f, "tensor 'fc1/w'", "negative dimension"});
  expect_error_with(
      [&] { train::parse_checkpoint(checkpoint_bytes(one_tensor("[1e300]", "0", "16"), 64), f); },
      {f, "tensor 'fc1/w' shape", "out of range"});
  // A header length past the end of the file.
  std::string b = checkpoint_bytes(one_tensor("[4]", "0", "16"), 16);
  const uint64_t huge = ~uint64_t{0} - 4;
  std::memcpy(b.data() + 8, &huge, sizeof(huge));
  b.resize(b.size() - 64);
  b += sha256_hex(b.data(), b.size());
  expect_error_with([&] { train::parse_checkpoint(b, f); }, {f, "header length"});

  // The well-formed neighbour loads, with the bytes at its offset.
  const train::Checkpoint ck =
      train::parse_checkpoint(checkpoint_bytes(one_tensor("[2,2]", "16", "16"), 32), f);
  ASSERT_EQ(ck.tensors.size(), 1u);
  EXPECT_EQ(ck.get("fc1/w").shape(), (Shape{2, 2}));
}

// A checkpoint of `n` f32 values, value i = i + offset, with the tensors (each n/2 values) listed
// in the header in reverse order of their bytes, overlapping by one value.
TEST(CheckpointStream, EntriesInAnyOrderAndOverlappingAreFilledFromOnePass) {
  const std::string header = R"({"step":3,"net":"lenet","config_toml":"x = 1","tensors":[)"
                             R"({"name":"b","dtype":"f32","shape":[3],"offset":8,"nbytes":12},)"
                             R"({"name":"a","dtype":"f32","shape":[3],"offset":0,"nbytes":12}]})";
  std::string b("TGCKPT\0\1", 8);
  const uint64_t hlen = header.size();
  b.append(reinterpret_cast<const char*>(&hlen), sizeof(hlen));
  b += header;
  for (int i = 0; i < 5; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    b.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  b += sha256_hex(b.data(), b.size());
  const Checkpoint ck = train::parse_checkpoint(b, "mem");
  EXPECT_EQ(ck.step, 3);
  EXPECT_EQ(ck.get("a").to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(ck.get("b").to_vector<float>(), (std::vector<float>{2.5f, 3.5f, 4.5f}));
}

// load_checkpoint reads a file once, straight into the tensors a sink lends (the run's own
// parameters), bit for bit what save_checkpoint wrote; the header alone is readable first.
TEST(CheckpointStream, FileLoadsIntoTheSinksTensorsAndMatchesTheBytes) {
  TempDir dir;
  const std::string path = dir / "c.tgckpt";
  Checkpoint out;
  out.step = 7;
  out.net = "lenet";
  out.config_toml = "[train]\niterations = 9\n";
  // 3 MiB + 5 values: the payload spans the 4 MiB read pieces unevenly.
  Tensor big = Tensor::empty({(3 << 20) / 4 + 5});
  for (int64_t i = 0; i < big.numel(); ++i) big.data<float>()[i] = static_cast<float>(i % 977);
  Tensor small = Tensor::from_vector(std::vector<int64_t>{1, -2, 3}, {3});
  out.tensors = {{"params", big}, {"log/n", small}, {"ema", big.clone()}};
  train::save_checkpoint(path, out);

  const Checkpoint head = train::load_checkpoint_header(path);
  EXPECT_EQ(head.step, 7);
  EXPECT_EQ(head.config_toml, out.config_toml);
  EXPECT_TRUE(head.tensors.empty());

  Tensor mine = Tensor::zeros({big.numel()});
  Tensor wrong = Tensor::zeros({big.numel() - 1});  // does not fit: a new tensor instead
  const Checkpoint in =
      train::load_checkpoint(path, [&](const std::string& name, DType, const Shape&) -> Tensor {
        if (name == "params") return mine;
        if (name == "ema") return wrong;
        return {};
      });
  EXPECT_EQ(in.get("params").raw_data(), mine.raw_data());
  EXPECT_NE(in.get("ema").raw_data(), wrong.raw_data());
  EXPECT_EQ(std::memcmp(mine.raw_data(), big.raw_data(), big.nbytes()), 0);
  EXPECT_EQ(std::memcmp(in.get("ema").raw_data(), big.raw_data(), big.nbytes()), 0);
  EXPECT_EQ(in.get("log/n").to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(train::load_checkpoint(path).get("params").numel(), big.numel());
}

// Damage anywhere is reported as a checksum mismatch, even where it also breaks the header.
TEST(CheckpointStream, DamageInTheHeaderIsReportedAsTheChecksumMismatch) {
  TempDir dir;
  const std::string path = dir / "c.tgckpt";
  Checkpoint out;
  out.net = "lenet";
  out.tensors = {{"params", Tensor::zeros({1000})}};
  train::save_checkpoint(path, out);
  std::string bytes = read_text(path);
  for (size_t at : {size_t{20}, size_t{40}, bytes.size() - 100}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    write_text(path, bad);
    expect_error_with([&] { train::load_checkpoint(path); }, {path, "SHA-256 mismatch"});
  }
}

// ---- CheckpointFiles: the newest K of a run's checkpoints --------------------------------------

Checkpoint at_step(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.net = "lenet";
  c.tensors = {{"params", Tensor::full({8}, static_cast<float>(step))}};
  return c;
}

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(std::filesystem::path(p).filename().string());
  return out;
}

TEST(CheckpointFiles, KeepsTheNewestKAndListsThemNewestFirst) {
  TempDir dir;
  train::CheckpointFiles files(dir.str(), 3);
  EXPECT_TRUE(files.candidates().empty());
  for (int64_t step : {10, 20, 30, 40}) files.save(at_step(step));
  // Names that only look like checkpoints are left alone and never tried.
  for (const char* other :
       {"checkpoint-x.tgckpt", "checkpoint--5.tgckpt", "checkpoint-7.tgckpt.tmp",
        "checkpoint-9.tgckpt.damaged", "my-checkpoint-99.tgckpt"})
    write_text(dir / other, "not a checkpoint");
  EXPECT_EQ(names(files.candidates()),
            (std::vector<std::string>{"checkpoint.tgckpt", "checkpoint-30.tgckpt",
                                      "checkpoint-20.tgckpt"}));
  EXPECT_EQ(train::load_checkpoint(files.latest()).step, 40);
  EXPECT_EQ(
      train::load_checkpoint(dir / "checkpoint-30.tgckpt").get("params").to_vector<float>()[0],
      30.0f);
  EXPECT_EQ(train::load_checkpoint(dir / "checkpoint-20.tgckpt").step, 20);
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoint-x.tgckpt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoint-9.tgckpt.damaged"));
}

TEST(CheckpointFiles, OneKeptIsTheLatestAlone) {
  TempDir dir;
  train::CheckpointFiles files(dir.str(), 1);
  for (int64_t step : {5, 10, 15}) files.save(at_step(step));
  EXPECT_EQ(names(files.candidates()), (std::vector<std::string>{"checkpoint.tgckpt"}));
  EXPECT_EQ(train::load_checkpoint(files.latest()).step, 15);
}

TEST(CheckpointFiles, ALatestNotKnownIntactIsReplacedNotKept) {
  TempDir dir;
  write_text(dir / "checkpoint.tgckpt", "torn");
  train::CheckpointFiles files(dir.str(), 3);
  files.save(at_step(7));  // the run never said the torn file was intact
  EXPECT_EQ(names(files.candidates()), (std::vector<std::string>{"checkpoint.tgckpt"}));
  // A run resumed from the latest file says so; its next save keeps it.
  train::CheckpointFiles again(dir.str(), 3);
  again.set_latest_step(7);
  again.save(at_step(9));
  EXPECT_EQ(names(again.candidates()),
            (std::vector<std::string>{"checkpoint.tgckpt", "checkpoint-7.tgckpt"}));
  // Saving the same step again (an interrupt right after a periodic checkpoint) keeps no copy.
  again.save(at_step(9));
  EXPECT_EQ(names(again.candidates()),
            (std::vector<std::string>{"checkpoint.tgckpt", "checkpoint-7.tgckpt"}));
}

TEST(CheckpointFiles, SetAsideRenamesAndAFailedSaveKeepsWhatWasThere) {
  TempDir dir;
  train::CheckpointFiles files(dir.str(), 2);
  files.save(at_step(1));
  files.save(at_step(2));
  const std::vector<std::string> moved = files.set_aside({files.latest()});
  EXPECT_EQ(names(moved), (std::vector<std::string>{"checkpoint.tgckpt.damaged"}));
  EXPECT_EQ(names(files.candidates()), (std::vector<std::string>{"checkpoint-1.tgckpt"}));
  expect_error_with([&] { files.set_aside({dir / "absent.tgckpt"}); },
                    {"cannot rename", "absent.tgckpt"});
  // A tensor that cannot be written fails the save; the older checkpoint stays.
  Checkpoint bad = at_step(3);
  bad.tensors.emplace_back("undefined", Tensor());
  expect_error_with([&] { files.save(bad); }, {"undefined"});
  EXPECT_EQ(train::load_checkpoint(dir / "checkpoint-1.tgckpt").step, 1);
}

}  // namespace
}  // namespace tg::testing
