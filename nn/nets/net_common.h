// Internals shared by the net definitions in nn/nets (not part of the public API): resolving
// NetOptions against a net's defaults, and the per-net factories that registry.cpp lists.
#pragma once

#include <memory>
#include <string>

#include "nn/nets/net.h"

namespace tg::nets_detail {

// The net's NetInfo with every "unset" option replaced by the default given here. Throws if the
// device is unusable or an explicit option is invalid (negative sizes, ...).
NetInfo resolve_info(const std::string& name, const NetOptions& o, int64_t default_channels,
                     int64_t default_image_size, int64_t default_classes, const Device& device);
// options.dropout_ratio, or `default_ratio` when it is unset (< 0). Throws unless the result is
// in [0, 1).
float resolve_dropout(const std::string& name, const NetOptions& o, float default_ratio);

std::unique_ptr<Net> make_lenet(const NetOptions& o, const Device& device);
std::unique_ptr<Net> make_cifarnet(const NetOptions& o, const Device& device);
std::unique_ptr<Net> make_alexnet(const NetOptions& o, const Device& device);
std::unique_ptr<Net> make_googlenet(const NetOptions& o, const Device& device);
std::unique_ptr<Net> make_vgg_a(const NetOptions& o, const Device& device);

}  // namespace tg::nets_detail
