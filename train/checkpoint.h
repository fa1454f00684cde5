// Checkpoints: everything a run needs to continue bit-identically (parameters, optimizer slots,
// EMA shadow, batch-norm moving statistics, each worker's compressor state, the iteration count
// and the resolved config) in one self-checking file.
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
//
// Tensor names the trainer writes: "params", "ema", "optim/<name>", "buffer/<name>",
// "log/loss_sum", "log/window_steps", and "compressor/worker<w>/<name>" for worker w's compressor
// state (terngrad/compressor.h: Compressor::state; only stateful methods, e.g. onebit's
// "compressor/worker0/residual"). Checkpoints of stateless methods have no compressor entries,
// so files written before compressor state existed still load for them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::train {

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

// Where load_checkpoint puts an entry: given its name, dtype and shape, a contiguous host tensor
// of that dtype and element count to read the bytes into directly (a run's own parameters, so
// they are not held twice), or an undefined Tensor (or one that does not fit) for a new one.
using CheckpointSink = std::function<Tensor(const std::string& name, DType, const Shape&)>;

// Reads and verifies a checkpoint: magic, version, size, checksum, header, tensor bounds. The
// file is streamed: read once, in 4 MiB pieces, straight into the tensors while its SHA-256 is
// computed, so loading needs the tensors plus 4 MiB, never a second copy of the file. The digest
// is compared after the last byte: on a mismatch it throws, and tensors the sink lent may hold
// part of the damaged data. Throws tg::Error naming the file and what is wrong ("not a terngrad
// checkpoint", "corrupt: checksum mismatch", "truncated", ...).
Checkpoint load_checkpoint(const std::string& path, const CheckpointSink& sink = {});
// Only the header's step, net and config (no tensors), read without the checksum: what a run
// compares with its own config before it builds anything. load_checkpoint verifies the file.
Checkpoint load_checkpoint_header(const std::string& path);
// The same from the file's bytes; `source` names it in errors. Every offset, size and shape in
// the header is checked (integral, in range, inside the payload) before it is used.
Checkpoint parse_checkpoint(std::string_view bytes, const std::string& source);

// The checkpoint name of worker `worker`'s compressor state entry `name`.
std::string compressor_state_key(int worker, const std::string& name);

// Appends the state of workers 0..workers-1 (Compressor::state) as "compressor/worker<w>/<name>".
void add_compressor_state(Checkpoint& ckpt, const tern::Compressor& compressor, int workers);

// Restores workers 0..workers-1 of `compressor` (null: the run has none) from the checkpoint's
// "compressor/..." entries. Throws naming the checkpoint and what is wrong when an entry name is
// malformed, the checkpoint holds state for another number of workers than `workers` (or any
// state while the run has no compressor), or a worker's entries are not what the method expects
// (names, dtype, shape; a stateful method's state missing from an older checkpoint included).
// The layout (names, worker count) is checked before anything is loaded; a worker whose entries
// the method refuses throws after the workers before it were loaded (the run is abandoned then).
void load_compressor_state(const Checkpoint& ckpt, tern::Compressor* compressor, int workers);

// A run's checkpoints in its output directory. The newest is always checkpoint.tgckpt; with
// keep > 1, writing a new one first keeps the one it replaces as checkpoint-<its step>.tgckpt (a
// hard link, else a rename), then removes the numbered ones beyond the newest keep - 1. At every
// instant the newest checkpoint is a complete file under one of the names, so a run killed
// anywhere, or one whose newest file was torn by the storage, resumes from the newest intact one.
class CheckpointFiles {
 public:
  static constexpr const char* kLatest = "checkpoint.tgckpt";

  CheckpointFiles(std::string dir, int64_t keep);
  const std::string& latest() const { return latest_; }
  // checkpoint-<step>.tgckpt in the directory.
  std::string numbered(int64_t step) const;
  // The files a resume may read, newest first: checkpoint.tgckpt, then checkpoint-<step>.tgckpt
  // by decreasing step (other names are ignored). Empty when the directory holds none.
  std::vector<std::string> candidates() const;
  // Writes `ckpt` as the newest (save_checkpoint), keeping and pruning as described above.
  // Throws as save_checkpoint does; the files already there stay as they were then.
  void save(const Checkpoint& ckpt);
  // The step of the intact checkpoint now at latest() (the one a run resumed from), so the next
  // save keeps it; a latest() not known intact is replaced without being kept.
  void set_latest_step(int64_t step) { latest_step_ = step; }
  // Renames each file to "<file>.damaged" (kept for inspection, never read again); returns the
  // new names. Throws naming the file when a rename fails.
  std::vector<std::string> set_aside(const std::vector<std::string>& files) const;

 private:
  std::string dir_, latest_;
  int64_t keep_;
  std::optional<int64_t> latest_step_;
};

// Writes `text` to `path` atomically (temp file + fsync + rename).
void write_file_atomic(const std::string& path, const std::string& text);

// Test-only fault injection for the write path: this process's checkpoint and output-file
// writes fail with `error` (ENOSPC: a disk that fills; EIO: a device that fails) once
// `after_bytes` bytes have been written in all, after a short write up to that point. Only the
// test driver tests/testing/faulty_main.cpp calls it (tests/cmd/faults_test.cpp); the terngrad
// binary never does. Throws unless error is ENOSPC or EIO.
void inject_write_fault(int error, uint64_t after_bytes);

}  // namespace tg::train
