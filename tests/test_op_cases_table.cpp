// test_op_cases_table.cpp — the op table put together (op_cases.h): every area's
// cases in one list, the per-case Env and input checks the harnesses share, and
// the table's own sanity test (unique names, every area present).
#include <map>
#include <set>
#include <sstream>

#include "op_cases.h"

namespace opcase {

const std::vector<std::string>& op_case_areas() {
  static const std::vector<std::string> areas{"elementwise", "reduction", "matmul", "shape", "nn"};
  return areas;
}

const std::vector<OpCase>& all_op_cases() {
  // Built once: the cases hold only functions, and every run makes fresh inputs.
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> all;
    auto add = [&all](const std::string& area, std::vector<OpCase> cases) {
      for (OpCase& c : cases) {
        c.area = area;
        all.push_back(std::move(c));
      }
    };
    add("elementwise", elementwise_cases());
    add("reduction", reduction_cases());
    add("matmul", matmul_cases());
    add("shape", shape_cases());
    add("nn", nn_cases());
    return all;
  }();
  return table;
}

uint64_t seed_of(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

Env env_for(const OpCase& c, rg::DType dtype, rg::Device device) {
  return Env{.dtype = dtype, .device = device, .gen = rg::Generator(seed_of(c.name))};
}

std::string describe_inputs(const V& inputs) {
  std::ostringstream os;
  for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : "") << inputs[i].describe();
  return os.str();
}

std::string check_inputs(const OpCase& c, const V& inputs, rg::Device device) {
  bool any_grad = false, any_strided = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const rg::Tensor& x = inputs[i];
    std::string which = "input " + std::to_string(i) + " (" + x.describe() + ")";
    if (!x.defined()) return "input " + std::to_string(i) + " is undefined";
    if (x.device() != device) return which + " is not on " + device.str();
    if (x.requires_grad() && !x.is_leaf()) return which + " requires grad but is not a leaf";
    any_grad = any_grad || x.requires_grad();
    any_strided = any_strided || !x.is_contiguous();
  }
  if (c.flags.gradcheck && !any_grad) return "gradcheck is set but no input requires grad";
  if (c.flags.gradcheck && c.flags.large) return "a large case cannot be gradchecked";
  if (c.flags.non_contiguous && !any_strided)
    return "non_contiguous is set but every input is contiguous";
  return "";
}

}  // namespace opcase

TEST_CASE("op_cases: names are unique, every area has cases, inputs are well formed") {
  std::set<std::string> names;
  std::map<std::string, int> per_area;
  for (const opcase::OpCase& c : opcase::all_op_cases()) {
    CAPTURE(c.name);
    CHECK_MESSAGE(names.insert(c.name).second, "duplicate case name " << c.name);
    CHECK_MESSAGE(c.name.find(' ') == std::string::npos, "case name with a space: " << c.name);
    ++per_area[c.area];
    // The float64 CPU inputs (what the gradcheck gets) pass the harnesses' checks.
    opcase::Env env = opcase::env_for(c, rg::kFloat64, rg::kCPU);
    std::string problem = opcase::check_inputs(c, c.inputs(env), rg::kCPU);
    CHECK_MESSAGE(problem.empty(), c.name << ": " << problem);
  }
  for (const std::string& area : opcase::op_case_areas()) CHECK_MESSAGE(per_area[area] > 0, area);
}
