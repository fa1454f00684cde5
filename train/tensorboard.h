// TensorBoard event files: the scalars of a run (train/trainer.h writes those of metrics.jsonl,
// cmd/bounds_recorder.h those of bounds.jsonl), readable by `tensorboard --logdir DIR`.
//
// An event file is TFRecord framing around serialized `tensorflow.Event` protos:
//   record  = uint64 length (little endian) | uint32 masked_crc32c(length's 8 bytes)
//             | data (length bytes) | uint32 masked_crc32c(data)
//   masked  = ((crc >> 15) | (crc << 17)) + 0xa282ead8   (crc: CRC-32C, Castagnoli)
// The first event of a file carries file_version "brain.Event:2"; every later one a wall time,
// a step and a Summary of (tag, simple_value) pairs. The few fields used (tensorboard's
// compat/proto/event.proto and summary.proto):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }  (START = 1)
// They are encoded with libprotobuf's CodedOutputStream (wire format only: no .proto file, no
// protoc step); Debian has no C/C++ CRC-32C library, so crc32c() is ours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace tg::train::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing from `crc` (0 to
// start). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8 with c = crc32c(data).
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: length, its masked CRC, the data and the data's masked CRC (16 + size bytes).
std::string frame_record(std::string_view data);

struct Scalar {
  std::string tag;
  double value;  // stored as float32 (simple_value); NaN stays NaN
};

// Serialized Event protos (the record data, before framing).
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& values);
std::string session_start_event(double wall_time, int64_t step);

// Appends events to a new file in an existing directory. Each call writes whole records and
// flushes them to the OS, so a run that dies keeps every curve point written so far.
class EventWriter {
 public:
  // Creates DIR/events.out.tfevents.<unix seconds>.<hostname> (".1", ".2", ... appended if the
  // name is taken: TensorBoard reads the files of a directory in name order) and writes the
  // file_version event. Throws tg::Error naming the file if it cannot be written.
  explicit EventWriter(const std::string& dir);

  // One event holding `values` at `step`. Throws tg::Error if the write fails (disk full).
  void scalars(int64_t step, const std::vector<Scalar>& values);
  // A SessionLog START at `step`: TensorBoard drops the points of earlier files with step >=
  // `step` (what a run resumed from a checkpoint redoes; metrics.jsonl drops them too).
  void restart(int64_t step);

  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace tg::train::tensorboard
