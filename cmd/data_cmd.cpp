#include "cmd/data_cmd.h"

#include <cstdio>

#include "datasets/fetch.h"
#include "nn/core/json.h"

namespace tg::cli {

CLI::App* add_data_command(CLI::App& app, DataArgs& a) {
  auto* data = app.add_subcommand("data", "Dataset utilities");
  data->require_subcommand(1);
  auto* fetch = data->add_subcommand(
      "fetch", "Download a dataset's official files and verify their checksums");
  fetch->add_option("dataset", a.dataset, "mnist | fashion-mnist | cifar10")->required();
  fetch->add_option("--dir", a.dir, "Destination directory (default: data/<dataset>)");
  fetch->add_option("--mirror", a.mirror,
                    "Base URL to fetch the same files from instead of the official site");
  fetch->add_flag("--force", a.force, "Download again even if verified files are present");
  return fetch;
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
