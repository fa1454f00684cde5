// Checkpoints: everything a run needs to continue bit-identically (parameters, optimizer slots,
// EMA shadow, batch-norm moving statistics, the iteration count and the resolved config) in one
// self-checking file.
//
// File layout (little-endian):
//   bytes 0..7     magic "TGCKPT\0" + format version byte (1)
//   u64            header length H
//   H bytes        header, JSON: {"step": .., "net": "..", "config_toml": "..",
//                  "tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}
//   ...            tensor payloads at the offsets the header gives (relative to the payload start)
//   64 bytes       SHA-256 (lowercase hex) of every byte before it
// Writing goes to "<path>.tmp", is flushed and fsync'ed, then renamed over <path>, so a crash
// (even kill -9) leaves either the old checkpoint or the new one, never a torn file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/core/tensor.h"

namespace tg::cli {

struct Checkpoint {
  int64_t step = 0;         // iterations completed
  std::string net;          // model.name
  std::string config_toml;  // the resolved config of the run that wrote it
  std::vector<std::pair<std::string, Tensor>> tensors;  // host tensors, contiguous

  // The tensor called `name`; throws naming the checkpoint file and the missing entry.
  const Tensor& get(const std::string& name) const;
  bool has(const std::string& name) const;
  std::string source;  // the file it was read from (for errors); empty when built in memory
};

// Atomic write (temp file + fsync + rename). Tensors may live on any device (copied to host).
// Throws naming the path if the directory is not writable or the disk is full.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// Reads and verifies a checkpoint: magic, version, size, checksum, header, tensor bounds.
// Throws tg::Error naming the file and what is wrong ("not a terngrad checkpoint",
// "corrupt: checksum mismatch", "truncated", ...).
Checkpoint load_checkpoint(const std::string& path);

// Writes `text` to `path` atomically (temp file + fsync + rename).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace tg::cli
