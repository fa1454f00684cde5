// The one name -> factory table of the paper's networks (nn/nets/*.cpp define the factories).
#include <functional>
#include <utility>

#include "nn/nets/net_common.h"

namespace tg {

namespace {

using Factory = std::function<std::unique_ptr<Net>(const NetOptions&, const Device&)>;

const std::vector<std::pair<std::string, Factory>>& table() {
  static const std::vector<std::pair<std::string, Factory>> t = {
      {"lenet", nets_detail::make_lenet},     {"cifarnet", nets_detail::make_cifarnet},
      {"alexnet", nets_detail::make_alexnet}, {"googlenet", nets_detail::make_googlenet},
      {"vgg_a", nets_detail::make_vgg_a},
  };
  return t;
}

}  // namespace

std::vector<std::string> net_names() {
  std::vector<std::string> names;
  for (const auto& e : table()) names.push_back(e.first);
  return names;
}

std::unique_ptr<Net> make_net(const std::string& name, const NetOptions& options,
                              const Device& device) {
  for (const auto& e : table())
    if (e.first == name) return e.second(options, device);
  std::string known;
  for (const auto& e : table()) known += (known.empty() ? "" : ", ") + e.first;
  TG_THROW("unknown net '", name, "'; known nets: ", known);
}

}  // namespace tg
