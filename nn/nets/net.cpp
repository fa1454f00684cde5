#include "nn/nets/net.h"

#include "nn/nets/net_common.h"

namespace tg {

void Net::check_input(const Tensor& x) const {
  const NetInfo& i = info_;
  const std::string want = "[N, " + std::to_string(i.in_channels) + ", " +
                           std::to_string(i.image_size) + ", " + std::to_string(i.image_size) +
                           "] f32 on " + device_.str();
  TG_CHECK(x.defined(), i.name, ": input is undefined; expected ", want);
  TG_CHECK(x.dtype() == DType::f32, i.name, ": input has dtype ", dtype_name(x.dtype()),
           "; expected ", want);
  TG_CHECK(x.device() == device_, i.name, ": input is on ", x.device().str(), "; expected ", want);
  const Shape& s = x.shape();
  TG_CHECK(s.size() == 4 && s[0] >= 1 && s[1] == i.in_channels && s[2] == i.image_size &&
               s[3] == i.image_size,
           i.name, ": input shape ", shape_str(s), " does not match the expected ", want);
}

namespace nets_detail {

NetInfo resolve_info(const std::string& name, const NetOptions& o, int64_t default_channels,
                     int64_t default_image_size, int64_t default_classes, const Device& device) {
  check_device_usable(device);
  TG_CHECK(o.num_classes >= 0, name, ": num_classes must be > 0 (or 0 for the default ",
           default_classes, "), got ", o.num_classes);
  TG_CHECK(o.image_size >= 0, name, ": image_size must be > 0 (or 0 for the default ",
           default_image_size, "), got ", o.image_size);
  TG_CHECK(o.in_channels >= 0, name, ": in_channels must be > 0 (or 0 for the default ",
           default_channels, "), got ", o.in_channels);
  NetInfo info;
  info.name = name;
  info.in_channels = o.in_channels > 0 ? o.in_channels : default_channels;
  info.image_size = o.image_size > 0 ? o.image_size : default_image_size;
  info.num_classes = o.num_classes > 0 ? o.num_classes : default_classes;
  return info;
}

float resolve_dropout(const std::string& name, const NetOptions& o, float default_ratio) {
  const float r = o.dropout_ratio < 0 ? default_ratio : static_cast<float>(o.dropout_ratio);
  TG_CHECK(r >= 0.0f && r < 1.0f, name,
           ": dropout_ratio (fraction dropped) must be in [0, 1), got ", r);
  return r;
}

}  // namespace nets_detail

}  // namespace tg
