// device.cpp — naming devices.
#include "ringgrad/core/device.h"

#include <cctype>

#include "ringgrad/core/error.h"

namespace ringgrad {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    std::string num = text.substr(5);
    bool digits = true;
    for (char c : num) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits && num.size() < 6) return cuda(std::stoi(num));
  }
  fail("Device", "expected \"cpu\", \"cuda\" or \"cuda:N\", got \"", text, "\"");
}

Device Device::resolve(const std::string& text) {
  if (text == "auto") return cuda::is_available() ? cuda(0) : cpu();
  Device d = parse(text);
  if (d.is_cuda()) {
    RG_CHECK(
        cuda::device_count() > 0, "Device", "expected a CUDA device for \"", text, "\", got none",
        cuda::is_built() ? " (the driver reports no usable GPU)" : " (this build has no CUDA)");
    RG_CHECK(d.index < cuda::device_count(), "Device", "expected a CUDA device index below ",
             cuda::device_count(), ", got ", text);
  }
  return d;
}

std::string Device::str() const {
  std::string s = is_cpu() ? "cpu" : "cuda:";
  if (is_cuda()) s += std::to_string(index);
  return s;
}

}  // namespace ringgrad
