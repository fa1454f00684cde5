#include "cmd/data_cmd.h"

#include <cstdio>

#include "datasets/fetch.h"
#include "datasets/synthetic_folder.h"
#include "nn/core/json.h"

namespace tg::cli {

DataCommands add_data_command(CLI::App& app, DataArgs& a) {
  auto* data = app.add_subcommand("data", "Dataset utilities");
  data->require_subcommand(1);
  auto* fetch = data->add_subcommand(
      "fetch", "Download a dataset's official files and verify their checksums");
  fetch->add_option("dataset", a.dataset, "mnist | fashion-mnist | cifar10")->required();
  fetch->add_option("--dir", a.dir, "Destination directory (default: data/<dataset>)");
  fetch->add_option("--mirror", a.mirror,
                    "Base URL to fetch the same files from instead of the official site");
  fetch->add_flag("--force", a.force, "Download again even if verified files are present");
  auto* synth = data->add_subcommand(
      "synth-folder",
      "Write a deterministic ImageNet-layout JPEG folder (DIR/train/<class>/*.jpg, DIR/val/...) "
      "to try or benchmark the image-folder loader");
  synth->add_option("dir", a.synth_dir, "Where to write it")->required();
  synth->add_option("--classes", a.classes, "Classes (default 10)")->check(CLI::Range(1, 10000));
  synth->add_option("--train", a.train_per_class, "Training images per class (default 50)")
      ->check(CLI::Range(0, 1000000));
  synth->add_option("--val", a.val_per_class, "Validation images per class (default 10)")
      ->check(CLI::Range(0, 1000000));
  synth->add_option("--width", a.width, "Mean width; each image +-25% (default 500)")
      ->check(CLI::Range(8, 8192));
  synth->add_option("--height", a.height, "Mean height; each image +-25% (default 375)")
      ->check(CLI::Range(8, 8192));
  synth->add_option("--quality", a.quality, "JPEG quality (default 90)")->check(CLI::Range(1, 100));
  synth->add_option("--seed", a.seed, "Seed of the images (default 1)");
  return {fetch, synth};
}

int run_data_synth_folder(const DataArgs& a) {
  data::SyntheticFolderOptions o;
  o.classes = a.classes;
  o.train_per_class = a.train_per_class;
  o.val_per_class = a.val_per_class;
  o.width = a.width;
  o.height = a.height;
  o.quality = a.quality;
  o.seed = a.seed;
  const uint64_t bytes = data::write_synthetic_folder(a.synth_dir, o);
  const int64_t images = static_cast<int64_t>(o.classes) * (o.train_per_class + o.val_per_class);
  std::fprintf(
      stderr,
      "%lld images (%.1f MB) in %s: train with --set data.name=image-folder --set data.path=%s\n",
      static_cast<long long>(images), static_cast<double>(bytes) / 1e6, a.synth_dir.c_str(),
      a.synth_dir.c_str());
  std::printf("%s\n", json::Object()
                          .add("path", a.synth_dir)
                          .add("images", images)
                          .add("bytes", bytes)
                          .str()
                          .c_str());
  return 0;
}

int run_data_fetch(const DataArgs& a) {
  data::FetchOptions fo;
  fo.dataset = a.dataset;
  fo.dir = a.dir.empty() ? data::default_fetch_dir(a.dataset) : a.dir;
  fo.mirror = a.mirror;
  fo.force = a.force;
  fo.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const std::string where = data::fetch_dataset(fo);
  if (a.dir.empty())  // data/<name>: found there without data.path
    std::fprintf(stderr,
                 "%s is ready in %s: runs started from this directory find it without data.path\n",
                 a.dataset.c_str(), where.c_str());
  else
    std::fprintf(stderr, "%s is ready: pass --set data.path=%s\n", a.dataset.c_str(),
                 where.c_str());
  std::printf("%s\n", json::Object().add("dataset", a.dataset).add("path", where).str().c_str());
  return 0;
}

}  // namespace tg::cli
