#include "train/tensorboard.h"

#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "nn/core/error.h"

namespace tg::train::tensorboard {

namespace {

namespace pbio = google::protobuf::io;

// The byte-at-a-time table of the reflected Castagnoli polynomial: events are a few hundred
// bytes per logged step, so a faster CRC would save nothing measurable.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Protobuf wire types and field tags (field number << 3 | wire type).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };
constexpr uint32_t tag(uint32_t field, WireType w) {
  return field << 3 | w;
}

// Event, Summary, Summary.Value and SessionLog field numbers (see tensorboard.h).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
                   kEventSessionLog = 7;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;
constexpr uint32_t kSessionLogStatus = 1, kSessionStart = 1;

// Runs f(CodedOutputStream&) and returns the bytes it wrote.
template <class F>
std::string encode(F&& f) {
  std::string out;
  {
    pbio::StringOutputStream zs(&out);
    pbio::CodedOutputStream cs(&zs);
    f(cs);
  }  // the stream's destructor trims `out` to what was written
  return out;
}

void put_bytes(pbio::CodedOutputStream& cs, uint32_t field, std::string_view bytes) {
  cs.WriteTag(tag(field, kBytes));
  cs.WriteVarint32(static_cast<uint32_t>(bytes.size()));
  cs.WriteRaw(bytes.data(), static_cast<int>(bytes.size()));
}

// The fields every event starts with.
void put_head(pbio::CodedOutputStream& cs, double wall_time, int64_t step) {
  cs.WriteTag(tag(kEventWallTime, kFixed64));
  cs.WriteLittleEndian64(std::bit_cast<uint64_t>(wall_time));
  cs.WriteTag(tag(kEventStep, kVarint));
  cs.WriteVarint64(static_cast<uint64_t>(step));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (unsigned char b : data) crc = kCrcTable[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
  const std::string len = encode([&](pbio::CodedOutputStream& cs) {
    cs.WriteLittleEndian64(static_cast<uint64_t>(data.size()));
  });
  return encode([&](pbio::CodedOutputStream& cs) {
    cs.WriteRaw(len.data(), static_cast<int>(len.size()));
    cs.WriteLittleEndian32(masked_crc32c(len));
    cs.WriteRaw(data.data(), static_cast<int>(data.size()));
    cs.WriteLittleEndian32(masked_crc32c(data));
  });
}

std::string file_version_event(double wall_time) {
  return encode([&](pbio::CodedOutputStream& cs) {
    put_head(cs, wall_time, 0);
    put_bytes(cs, kEventFileVersion, "brain.Event:2");
  });
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& values) {
  const std::string summary = encode([&](pbio::CodedOutputStream& cs) {
    for (const Scalar& v : values) {
      const std::string value = encode([&](pbio::CodedOutputStream& vs) {
        put_bytes(vs, kValueTag, v.tag);
        vs.WriteTag(tag(kValueSimpleValue, kFixed32));
        vs.WriteLittleEndian32(std::bit_cast<uint32_t>(static_cast<float>(v.value)));
      });
      put_bytes(cs, kSummaryValue, value);
    }
  });
  return encode([&](pbio::CodedOutputStream& cs) {
    put_head(cs, wall_time, step);
    put_bytes(cs, kEventSummary, summary);
  });
}

std::string session_start_event(double wall_time, int64_t step) {
  const std::string log = encode([&](pbio::CodedOutputStream& cs) {
    cs.WriteTag(tag(kSessionLogStatus, kVarint));
    cs.WriteVarint32(kSessionStart);
  });
  return encode([&](pbio::CodedOutputStream& cs) {
    put_head(cs, wall_time, step);
    put_bytes(cs, kEventSessionLog, log);
  });
}

EventWriter::EventWriter(const std::string& dir) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const auto secs = static_cast<long long>(now_seconds());
  const std::string base =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(secs) + "." + host))
          .string();
  path_ = base;
  for (int n = 1; std::filesystem::exists(path_); ++n) path_ = base + "." + std::to_string(n);
  out_.open(path_, std::ios::binary | std::ios::out | std::ios::trunc);
  TG_CHECK(out_.good(), "cannot open ", path_, " for writing: ", std::strerror(errno));
  write(file_version_event(now_seconds()));
}

void EventWriter::scalars(int64_t step, const std::vector<Scalar>& values) {
  write(scalars_event(now_seconds(), step, values));
}

void EventWriter::restart(int64_t step) {
  write(session_start_event(now_seconds(), step));
}

void EventWriter::write(const std::string& event) {
  const std::string record = frame_record(event);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  TG_CHECK(out_.good(), "cannot write ", path_, ": ", std::strerror(errno));
}

}  // namespace tg::train::tensorboard
