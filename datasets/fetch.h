// `terngrad data fetch`: download a dataset's files from its official source (or a mirror) with
// libcurl, verify each file's size and MD5 against a built-in table, and extract archives.
//
//   mnist          the four IDX .gz files (60000 train / 10000 test digits)
//   fashion-mnist  the four IDX .gz files of Zalando's Fashion-MNIST
//   cifar10        cifar-10-binary.tar.gz, extracted to <dir>/cifar-10-batches-bin/
//
// Guarantees: a file appears under its final name only after its checksum matched (downloads go
// to "<file>.part", renamed afterwards; a failed download removes the .part). Files already
// present with the right checksum are not downloaded again unless `force`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tg::data {

struct FetchOptions {
  std::string dataset;  // one of fetchable_datasets()
  std::string dir;      // destination directory, created if missing; "" = default_fetch_dir()
  // "" = the official source. Otherwise each file is fetched from mirror + "/" + file name with
  // the same checksums; a mirror without "://" is a local directory (read through file://).
  std::string mirror;
  std::function<void(const std::string& line)> log;  // progress lines; may be empty
  bool force = false;  // download (and extract) again even when verified files are present
};

// Downloads, verifies and extracts; returns the directory to pass as data.path (`dir` for the
// IDX datasets, dir/cifar-10-batches-bin for cifar10). Throws tg::Error on an unknown dataset
// (listing the known ones), an uncreatable directory, an HTTP or transfer error (naming the URL
// and the HTTP status or curl message), or a size/MD5 mismatch (naming the file, the URL and the
// expected vs. received size or MD5).
std::string fetch_dataset(const FetchOptions& options);

// Names fetch_dataset() accepts: mnist, fashion-mnist, cifar10.
std::vector<std::string> fetchable_datasets();

// The suggested destination for `terngrad data fetch NAME` without --dir: "data/NAME".
std::string default_fetch_dir(const std::string& dataset);

// One downloadable file of the built-in table. size < 0: unknown, only the MD5 is checked.
struct FetchFile {
  std::string name;
  std::string md5;
  int64_t size = -1;
  std::string url;  // official URL
};

// The built-in table entry for `dataset`; throws like fetch_dataset() on an unknown name.
std::vector<FetchFile> fetch_files(const std::string& dataset);

// Extracts a ustar / GNU / pax tar archive, gzip-compressed or not, into `dest` (created if
// missing). Regular files and directories only; each file is written to "<file>.part", and all
// are renamed only once the whole archive was read (gzip CRC included), so after an error no
// file of the archive appears under its final name. Throws tg::Error naming the archive (and the
// entry, where one is at fault) on an absolute path, a ".." component, a link, device or fifo
// entry, a bad header checksum, a corrupt gzip stream, or a truncated archive.
// Returns the relative paths of the regular files extracted, in archive order.
std::vector<std::string> extract_tar_gz(const std::string& archive, const std::string& dest);

}  // namespace tg::data
