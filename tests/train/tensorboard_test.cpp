// TensorBoard event files (train/tensorboard.h): CRC-32C against its standard
// check values, the TFRecord framing and the Event bytes against hand-assembled
// ones (no Python needed), then a run resumed from a checkpoint, read back by
// the `tensorboard` Python package (tests/train/check_tensorboard.py) and
// compared with metrics.jsonl.
#include "train/tensorboard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "nn/core/error.h"
#include "tests/testing/files.h"
#include "tests/testing/tensorboard_check.h"
#include "train/trainer.h"

namespace tg::train::tensorboard {
namespace {

using namespace tg::config;

namespace fs = std::filesystem;
using tg::testing::TempDir;

std::string bytes(std::initializer_list<uint8_t> b) {
  return std::string(b.begin(), b.end());
}
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le32(uint32_t v) {
  return le64(v).substr(0, 4);
}
uint64_t get_le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}

// Splits a file's bytes into records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size()) << "truncated header at " << at;
    const uint64_t n = get_le(file, at, 8);
    EXPECT_EQ(get_le(file, at + 8, 4), masked_crc32c(file.substr(at, 8))) << "at " << at;
    EXPECT_LE(at + 16 + n, file.size()) << "truncated record at " << at;
    const std::string data = file.substr(at + 12, n);
    EXPECT_EQ(get_le(file, at + 12 + n, 4), masked_crc32c(data)) << "at " << at;
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Crc32c, StandardCheckValues) {
  EXPECT_EQ(crc32c("123456789"),
            0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 zero bytes, and the bytes 0x00 .. 0x1f.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  std::string ramp(32, '\0');
  for (int i = 0; i < 32; ++i) ramp[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(ramp), 0x46DD794Eu);
  // Continuing a CRC over a second piece is the CRC of the whole.
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u);
}

TEST(Crc32c, MaskedAsTfRecordMasksIt) {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8 (mod 2^32)
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c(std::string(8, '\0')),
            0x07980329u);  // an empty record's length
}

TEST(TfRecord, FramesLengthDataAndBothCrcs) {
  const std::string r = frame_record("abc");
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(r.substr(0, 8), le64(3));
  EXPECT_EQ(r.substr(8, 4), le32(masked_crc32c(le64(3))));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(r.substr(15, 4), le32(masked_crc32c("abc")));
  EXPECT_EQ(frame_record(""), le64(0) + le32(0x07980329u) + le32(masked_crc32c("")));
  // A length that needs more than one byte.
  const std::string big(300, 'x');
  const std::string rb = frame_record(big);
  EXPECT_EQ(rb.substr(0, 8), le64(300));
  EXPECT_EQ(rb.substr(12, 300), big);
}

TEST(Event, BytesAreTheProtoWireFormat) {
  const std::string head = bytes({0x09}) + le64(std::bit_cast<uint64_t>(1.5));  // wall_time
  // file_version = "brain.Event:2" (field 3, 13 bytes) at step 0.
  EXPECT_EQ(file_version_event(1.5), head + bytes({0x10, 0x00, 0x1a, 13}) + "brain.Event:2");
  // summary (5) { value (1) { tag (1) "a", simple_value (2) 0.5f } } at step
  // 300 (varint ac 02).
  const std::string value = bytes({0x0a, 1}) + "a" + bytes({0x15}) + le32(0x3f000000);
  const std::string summary = bytes({0x0a, static_cast<uint8_t>(value.size())}) + value;
  EXPECT_EQ(scalars_event(1.5, 300, {{"a", 0.5}}),
            head + bytes({0x10, 0xac, 0x02, 0x2a, static_cast<uint8_t>(summary.size())}) + summary);
  // session_log (7) { status (1) START (1) } at step 11.
  EXPECT_EQ(session_start_event(1.5, 11), head + bytes({0x10, 11, 0x3a, 2, 0x08, 1}));
  // Values are float32: a double rounds, NaN stays NaN.
  const std::string e = scalars_event(0, 1, {{"x", 0.1}, {"y", std::nan("")}});
  float x = 0, y = 0;
  const size_t at_x = e.find(bytes({0x15}) + le32(std::bit_cast<uint32_t>(0.1f)));
  ASSERT_NE(at_x, std::string::npos);
  std::memcpy(&x, e.data() + at_x + 1, 4);
  EXPECT_EQ(x, 0.1f);
  std::memcpy(&y, e.data() + e.size() - 4, 4);
  EXPECT_TRUE(std::isnan(y));
}

TEST(EventWriter, WritesFlushedRecordsToAFreshFilePerWriter) {
  TempDir dir;
  std::string first;
  {
    EventWriter w(dir.str());
    first = w.path();
    EXPECT_EQ(fs::path(first).filename().string().rfind("events.out.tfevents.", 0), 0u) << first;
    w.scalars(5, {{"train/loss", 2.25}, {"train/lr", 0.01}});
    // Flushed as written: readable before the writer closes.
    const auto recs = read_records(tg::testing::read_text(first));
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_NE(recs[0].find("brain.Event:2"), std::string::npos);
    EXPECT_NE(recs[1].find("train/loss"), std::string::npos);
    w.restart(6);
    w.scalars(6, {{"train/loss", 2.0}});
  }
  EXPECT_EQ(read_records(tg::testing::read_text(first)).size(), 4u);
  // A second writer in the same second gets another name, sorted after the
  // first (TensorBoard reads a directory's files in name order).
  EventWriter second(dir.str());
  EXPECT_NE(second.path(), first);
  const auto files = event_files(dir.path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].string(), first);
  EXPECT_THROW(EventWriter(dir / "missing"), Error);
}

Config small_run() {
  return default_config({"data.name=synthetic", "data.synthetic_size=256", "train.iterations=20",
                         "train.log_every=3", "train.eval_every=6", "train.checkpoint_every=10",
                         "workers.count=2", "compression.method=terngrad"});
}

// A run that dies after its step-10 checkpoint, having logged steps 12 and 15
// and evaluated at 12, then resumed: TensorBoard must show what metrics.jsonl
// keeps (the points after step 10 of the first file dropped, the resumed run's
// in a second file).
TEST(EventWriter, AResumedRunMatchesMetricsJsonl) {
  const Config c = small_run();
  TempDir dir;
  TrainOptions opt;
  opt.out_dir = dir / "run";
  {
    Trainer t(c, opt);
    for (int i = 0; i < 16; ++i) t.step();
  }
  opt.resume = true;
  Trainer(c, opt).run();
  EXPECT_EQ(event_files(opt.out_dir).size(), 2u);
  const auto r = tg::testing::check_tensorboard(opt.out_dir);
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("match metrics.jsonl"), std::string::npos) << r.output;
}

TEST(EventWriter, TheConfigKeyTurnsItOff) {
  Config c = small_run();
  c.train.iterations = 3;
  c.train.tensorboard = false;
  TempDir dir;
  TrainOptions opt;
  opt.out_dir = dir / "run";
  Trainer(c, opt).run();
  EXPECT_TRUE(fs::exists(dir / "run/metrics.jsonl"));
  EXPECT_TRUE(event_files(opt.out_dir).empty());
}

}  // namespace
}  // namespace tg::train::tensorboard
