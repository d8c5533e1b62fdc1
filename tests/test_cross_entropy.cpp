// test_cross_entropy.cpp — nn::cross_entropy's torch options (issue 16): class weights
// (with torch's mean over the weights of the targets not ignored, and with label
// smoothing), probability (soft) targets (± label smoothing, ± weight), logits
// (N, C, d1, d2) with targets (N, d1, d2), and unbatched logits (C) with a scalar target —
// each against golden values from torch 2.15.0 in float64 (all three reductions and the
// gradient of the mean), plus float64 gradchecks of every form and reduction.
//
// The golden values come from this script (torch 2.15.0+cu132, CPU, float64). `show`
// prints a tensor flattened, row-major; `run` prints the mean, sum and none reductions and
// the logits' gradient of the mean; the constants below are named after its first argument.
//
//   import torch, math
//   import torch.nn.functional as F
//   t = torch.float64
//   def show(name, v): print(name, [float(f"{x:.17g}") for x in v.detach().reshape(-1).tolist()])
//   def wave(*shape):  # sin(0.7 i + 0.3) * 1.5, row-major
//       n = math.prod(shape)
//       return (torch.sin(torch.arange(n, dtype=t) * 0.7 + 0.3) * 1.5).reshape(shape)
//   def probs(*shape, dim):  # softmax over dim of cos(0.5 i)
//       n = math.prod(shape)
//       return torch.softmax(torch.cos(torch.arange(n, dtype=t) * 0.5).reshape(shape), dim)
//   w = torch.tensor([0.5, 1.0, 2.0, 0.25, 1.5], dtype=t)
//   def run(name, x, y, **kw):
//       x = x.clone().requires_grad_()
//       for red in ["mean", "sum", "none"]:
//           l = F.cross_entropy(x, y, reduction=red, **kw); show(f"{name}.{red}", l)
//       x.grad = None; F.cross_entropy(x, y, **kw).backward(); show(f"{name}.grad", x.grad)
//   print(torch.__version__)
//   x = wave(4, 5); y = torch.tensor([1, 4, 0, 2])
//   run("w", x, y, weight=w)
//   run("w_ign", x, torch.tensor([1, -100, 0, 2]), weight=w)
//   run("w_ign3", x, torch.tensor([1, 3, 0, 3]), weight=w, ignore_index=3)
//   run("w_ls", x, y, weight=w, label_smoothing=0.2)
//   run("w_ls_ign", x, torch.tensor([1, -100, 0, 2]), weight=w, label_smoothing=0.2)
//   p = probs(4, 5, dim=1)
//   run("soft", x, p)
//   run("soft_ls", x, p, label_smoothing=0.1)
//   run("soft_w_ls", x, p, weight=w, label_smoothing=0.1)
//   x4 = wave(2, 3, 2, 2); y4 = torch.tensor([0, 2, 1, 1, 2, 0, -100, 1]).reshape(2, 2, 2)
//   run("nd", x4, y4)
//   run("nd_w_ls", x4, y4, weight=w[:3], label_smoothing=0.1)
//   run("nd_soft", x4, probs(2, 3, 2, 2, dim=1))
//   x1 = wave(5)
//   run("u", x1, torch.tensor(3))
//   run("u_w_ls", x1, torch.tensor(3), weight=w, label_smoothing=0.3)
//   run("u_soft", x1, probs(5, dim=0), weight=w)
#include <cmath>
#include <string>

#include "test_helpers.h"

namespace nn = rg::nn;
using test::f64;
using test::grad_ok;
using test::i64;
using V = std::vector<rg::Tensor>;

namespace {

struct Golden {
  std::vector<double> mean, sum, none, grad;
};

const Golden k_w{
    {1.5371978807250422},
    {7.685989403625211},
    {1.3282431096067568, 0.9778197706044882, 0.6097840547385134, 4.770142468675452},
    {0.02336287186246467,  -0.1470115345450441,  0.06637795480504792,  0.04130826291580596,
     0.015962444961725532, 0.039126647081439765, 0.02260780963865293,  0.026034135967917982,
     0.05591180760134054,  -0.1436804002893512,  -0.07046422984262747, 0.03637873917884502,
     0.022295859547054507, 0.008560086401605858, 0.003229544715122057, 0.014473695391822656,
     0.01695493554594864,  -0.36316703203382067, 0.10302265287071413,  0.22871574822533522}};
const Golden k_w_ign{{1.9166198951487778},
                     {6.708169633020723},
                     {1.3282431096067568, 0.0, 0.6097840547385134, 4.770142468675452},
                     {0.03337553123209238,
                      -0.21001647792149156,
                      0.09482564972149701,
                      0.059011804165437075,
                      0.02280349280246504,
                      0.0,
                      0.0,
                      0.0,
                      0.0,
                      0.0,
                      -0.1006631854894678,
                      0.051969627398350024,
                      0.031851227924363575,
                      0.012228694859436938,
                      0.004613635307317224,
                      0.020676707702603794,
                      0.02422133649421234,
                      -0.5188100457626009,
                      0.14717521838673445,
                      0.32673678317905025}};
const Golden k_w_ign3{{1.2920181095635135},
                      {1.9380271643452702},
                      {1.3282431096067568, 0.0, 0.6097840547385134, 0.0},
                      {0.07787623954154889,
                       -0.4900384484834803,
                       0.2212598493501597,
                       0.13769420971935317,
                       0.05320814987241843,
                       0.0,
                       0.0,
                       0.0,
                       0.0,
                       0.0,
                       -0.23488076614209152,
                       0.1212624639294834,
                       0.07431953182351501,
                       0.02853362133868619,
                       0.010765149050406856,
                       0.0,
                       0.0,
                       0.0,
                       0.0,
                       0.0}};
const Golden k_w_ls{
    {1.5484718728997802},
    {7.742359364498901},
    {1.414361051047438, 1.1778776436057883, 0.9032779082714213, 4.2468427615742534},
    {0.019596500581089315, -0.11448164989049454, 0.051041734353098396, 0.03972134554496402,
     0.004122069411342786, 0.032779048256553374, 0.013251341060333752, 0.0084720878098429,
     0.050557099145260104, -0.10505957627199008, -0.04796636040800551, 0.03638206179819092,
     0.011200948647406495, 0.008443305409959145, -0.00805995544755109, 0.009098694329599505,
     0.007344216669083522, -0.3026661639906077,  0.0912355008479963,   0.19498775214392838}};
const Golden k_w_ls_ign{{1.8755662059694607},
                        {6.564481720893113},
                        {1.414361051047438, 0.0, 0.9032779082714213, 4.2468427615742534},
                        {0.027995000830127594,
                         -0.16354521412927792,
                         0.07291676336156913,
                         0.05674477934994859,
                         0.0058886705876325515,
                         0.0,
                         0.0,
                         0.0,
                         0.0,
                         0.0,
                         -0.06852337201143643,
                         0.05197437399741562,
                         0.016001355210580718,
                         0.01206186487137021,
                         -0.01151422206793013,
                         0.012998134756570717,
                         0.010491738098690742,
                         -0.4323802342722967,
                         0.13033642978285184,
                         0.27855393163418335}};
const Golden k_soft{
    {1.9900878115174008},
    {7.960351246069603},
    {1.6662914738556809, 1.665688101571062, 1.9918576693627015, 2.636514001280159},
    {-0.05006723711540529,  -0.0039015772853641106, 0.032914936500083106,  0.02033566408813703,
     0.000718213812549242,  -0.011525840820128579,  -0.017697040563452823, -0.016851106030574266,
     -0.004552151977778904, 0.05062613939193461,    0.04296201582021149,   0.043716699659779805,
     -0.004996128411428005, -0.04034091112869241,   -0.04134167593987095,  -0.08923507021469206,
     -0.04948434794413181,  -0.015040192815717345,  0.036448959386828364,  0.11731065158771284}};
const Golden k_soft_ls{
    {1.9835062562284902},
    {7.934025024913961},
    {1.6733362898047885, 1.6870938196172733, 1.9851201402515806, 2.5884747752403188},
    {-0.047140154421056686,  -0.0018878613749582218, 0.03292068720070578,  0.018465630543799072,
     -0.0023583019484899916, -0.012112702814662403,  -0.01904335237055313, -0.017996484096857005,
     -0.004437619479889299,  0.05359015876196188,    0.04104975677753347,  0.04343971448851308,
     -0.0039225506835215765, -0.03916679841542171,   -0.04140012216710334, -0.08440695723123394,
     -0.04847622967809684,   -0.016234113036259396,  0.034242979252565156, 0.114874320693025}};
const Golden k_soft_w_ls{
    {1.9163970983929959},
    {7.6655883935719835},
    {1.5221677543595484, 1.7357690758258189, 2.156337843228046, 2.251313720158571},
    {-0.009183420507482852, -0.002375808393135425, -0.017742313926610652, 0.042962514849083484,
     -0.01366097202185457,  0.012515433666076324,  -0.017732290132257487, -0.05617832123959981,
     0.03707788804660802,   0.024317289659172996,  0.0641135011035955,    0.051653705079023046,
     -0.05855054661298447,  0.008191252560218392,  -0.06540791212985253,  -0.038261021783235136,
     -0.049156330864961476, -0.056966285516581235, 0.05272013945386737,   0.09166349871091047}};
const Golden k_nd{{1.5649312449765937},
                  {10.954518714836157},
                  {0.7176523551352979, 1.2425701357605594, 3.575032037851742, 3.330823404746865,
                   0.5166966420832636, 1.4154975840819313, 0.0, 0.1562465551764969},
                  {-0.0731576686005142,
                   0.09130170171155863,
                   0.0767539986090899,
                   0.052952669146488524,
                   0.047621458022467165,
                   0.010320953121075055,
                   -0.13885506739506542,
                   -0.13774805071635887,
                   0.025536210578047017,
                   -0.10162265483263368,
                   0.06210106878597552,
                   0.08479538156987036,
                   0.052428188048962654,
                   -0.10817074748594627,
                   0.0,
                   0.007732649097869003,
                   0.005216424885408788,
                   0.019527827201768256,
                   0.0,
                   -0.020664532310545086,
                   -0.057644612934371425,
                   0.08864292028417801,
                   0.0,
                   0.012931883212676057}};
const Golden k_nd_w_ls{
    {1.458541103449994},
    {11.668328827599952},
    {0.48630633227056225, 2.414514482398181, 3.4025893581169657, 3.1600828920181767,
     1.0915415059625515, 0.7587142915605611, 0.0, 0.35457996527295754},
    {-0.023774010681088295,
     0.15103722891209312,
     0.0661957445960029,
     0.045022478594897095,
     0.01944563960280664,
     0.01314243179680296,
     -0.11310648703686028,
     -0.11212170344976093,
     0.004328371078281647,
     -0.16417966070889609,
     0.046910742440857404,
     0.06709922485486386,
     0.08584310704044779,
     -0.04113466229511503,
     0.0,
     0.004795502426645969,
     0.004581712568237656,
     0.005515880987543428,
     0.0,
     -0.007966156867922385,
     -0.09042481960868541,
     0.0356187813075716,
     0.0,
     0.0031706544412764123}};
const Golden k_nd_soft{
    {1.3256724871357548},
    {10.605379897086038},
    {0.9160916267550089, 0.890444451418622, 1.0248859454409762, 0.9810815393828494,
     1.4591285104425435, 1.3452897709812528, 1.6160519292506474, 2.3724061234141383},
    {-0.026181803722064162, -0.002165729831581989, 0.0043494162698860805, 0.007964210832565932,
     0.02051750190967923,   -0.006281523028073362, -0.010094852313456582, -0.009543668931941548,
     0.0056643018123849285, 0.008447252859655342,  0.005745436043570515,  0.0015794580993756246,
     -0.03765841297587655,  -0.0564346962948951,   -0.05910795758629595,  -0.045159331883310665,
     -0.023084152941814574, -0.00081381211201733,  0.053016224290315016,  0.09337376285812686,
     0.06074256591769113,   0.057248508406912445,  0.00609173329598096,   -0.04821443097481622}};
const Golden k_u{{1.5772548159918747},
                 {1.5772548159918747},
                 {1.5772548159918747},
                 {0.11681435931232334, 0.2649423272747795, 0.33188977402523956, -0.7934586854209702,
                  0.07981222480862765}};
const Golden k_u_w_ls{{3.2146777513665086},
                      {0.8036694378416271},
                      {0.8036694378416271},
                      {0.10895614425215375, 0.27928696145856785, 0.17050395708946955,
                       -0.35517902342510166, -0.2035680393750898}};
const Golden k_u_soft{{1.49587163630948},
                      {1.49587163630948},
                      {1.49587163630948},
                      {-0.043332433064139295, -0.019246864373770618, -0.07313075775454755,
                       0.17240357929503974, -0.03669352410258244}};

// Every element against torch's, within tol·(1 + |want|).
void check_torch(const rg::Tensor& t, const std::vector<double>& want, double tol = 1e-14) {
  REQUIRE(t.defined());
  std::vector<double> got = t.tolist<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])),
                  "element " << i << ": got " << got[i] << ", torch " << want[i]);
}

// sin(0.7 i + 0.3) · 1.5, row-major (the script's wave).
rg::Tensor wave(const rg::Shape& shape) {
  std::vector<double> v(size_t(rg::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i) * 0.7 + 0.3) * 1.5;
  return f64(v, shape);
}

// softmax over dim of cos(0.5 i) (the script's probs).
rg::Tensor probs(const rg::Shape& shape, int64_t dim) {
  std::vector<double> v(size_t(rg::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(double(i) * 0.5);
  return rg::softmax(f64(v, shape), dim);
}

rg::Tensor class_weights() { return f64({0.5, 1.0, 2.0, 0.25, 1.5}); }

// The script's `run`: the three reductions and the mean's gradient against torch, the shape
// of Reduction::None, then float64 gradchecks of each reduction in the logits.
void check_case(const std::string& label, const rg::Tensor& logits, const rg::Tensor& target,
                nn::CrossEntropyOptions options, const Golden& want, const rg::Shape& none_shape) {
  INFO(label);
  options.reduction = nn::Reduction::Mean;
  check_torch(nn::cross_entropy(logits, target, options), want.mean);
  options.reduction = nn::Reduction::Sum;
  check_torch(nn::cross_entropy(logits, target, options), want.sum);
  options.reduction = nn::Reduction::None;
  rg::Tensor none = nn::cross_entropy(logits, target, options);
  CHECK_SHAPE(none, none_shape);
  check_torch(none, want.none);

  rg::Tensor x = f64(logits.tolist<double>(), logits.shape()).requires_grad_();
  options.reduction = nn::Reduction::Mean;
  nn::cross_entropy(x, target, options).backward();
  check_torch(x.grad(), want.grad);

  for (nn::Reduction r : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None}) {
    options.reduction = r;
    grad_ok(label + " gradcheck",
            [=](const V& in) { return nn::cross_entropy(in[0], target, options); },
            {f64(logits.tolist<double>(), logits.shape()).requires_grad_()});
  }
}

}  // namespace

TEST_CASE("cross_entropy: class weights, mean over the weights of the targets") {
  rg::Tensor x = wave({4, 5}), w = class_weights();
  check_case("w", x, i64({1, 4, 0, 2}), {.weight = w}, k_w, {4});
  // the sum of w[y_i]·nll_i over Σ w[y_i], not over N
  check_torch(nn::cross_entropy(x, i64({1, 4, 0, 2}), {.weight = w}),
              {k_w.sum[0] / (1.0 + 1.5 + 0.5 + 2.0)});
  // all-ones weights are the unweighted loss
  check_torch(
      nn::cross_entropy(x, i64({1, 4, 0, 2}), {.weight = rg::ones({5}, {.dtype = rg::kFloat64})}),
      nn::cross_entropy(x, i64({1, 4, 0, 2})).tolist<double>());
}

TEST_CASE("cross_entropy: weight with ignore_index") {
  rg::Tensor x = wave({4, 5}), w = class_weights();
  check_case("w_ign", x, i64({1, -100, 0, 2}), {.weight = w}, k_w_ign, {4});
  // an ignore_index inside [0, C): those targets' weights leave the mean's divisor
  check_case("w_ign3", x, i64({1, 3, 0, 3}), {.ignore_index = 3, .weight = w}, k_w_ign3, {4});
}

TEST_CASE("cross_entropy: weight with label_smoothing") {
  rg::Tensor x = wave({4, 5}), w = class_weights();
  check_case("w_ls", x, i64({1, 4, 0, 2}), {.label_smoothing = 0.2, .weight = w}, k_w_ls, {4});
  check_case("w_ls_ign", x, i64({1, -100, 0, 2}), {.label_smoothing = 0.2, .weight = w}, k_w_ls_ign,
             {4});
}

TEST_CASE("cross_entropy: probability targets, with label_smoothing and weight") {
  rg::Tensor x = wave({4, 5}), p = probs({4, 5}, 1);
  check_case("soft", x, p, {}, k_soft, {4});
  check_case("soft_ls", x, p, {.label_smoothing = 0.1}, k_soft_ls, {4});
  check_case("soft_w_ls", x, p, {.label_smoothing = 0.1, .weight = class_weights()}, k_soft_w_ls,
             {4});
  // ignore_index does not apply to probabilities (torch ignores it there too)
  check_torch(nn::cross_entropy(x, p, {.ignore_index = 0}), k_soft.mean);
  // differentiable in the targets and in the weights as well
  grad_ok("soft: d/dtarget, d/dweight",
          [x](const V& in) {
            return nn::cross_entropy(x, in[0], {.label_smoothing = 0.1, .weight = in[1]});
          },
          {f64(p.tolist<double>(), {4, 5}).requires_grad_(), class_weights().requires_grad_()});
  grad_ok("w_ls: d/dweight",
          [x](const V& in) {
            return nn::cross_entropy(x, i64({1, -100, 0, 2}),
                                     {.label_smoothing = 0.2, .weight = in[0]});
          },
          {class_weights().requires_grad_()});
}

TEST_CASE("cross_entropy: logits (N, C, d1, d2) with targets (N, d1, d2)") {
  rg::Tensor x = wave({2, 3, 2, 2});
  rg::Tensor y = i64({0, 2, 1, 1, 2, 0, -100, 1}, {2, 2, 2});
  check_case("nd", x, y, {}, k_nd, {2, 2, 2});
  check_case("nd_w_ls", x, y, {.label_smoothing = 0.1, .weight = f64({0.5, 1.0, 2.0})}, k_nd_w_ls,
             {2, 2, 2});
  check_case("nd_soft", x, probs({2, 3, 2, 2}, 1), {}, k_nd_soft, {2, 2, 2});
  // the same as the class dim moved last and flattened to (N·d1·d2, C)
  check_torch(nn::cross_entropy(x.permute({0, 2, 3, 1}).reshape({-1, 3}), y.reshape({-1}),
                                {.reduction = nn::Reduction::None}),
              k_nd.none);
}

TEST_CASE("cross_entropy: unbatched logits (C) with a scalar target") {
  rg::Tensor x = wave({5});
  rg::Tensor y = rg::full({}, 3.0, {.dtype = rg::kInt64});  // a 0-dim target
  check_case("u", x, y, {}, k_u, {});
  check_case("u_w_ls", x, y, {.label_smoothing = 0.3, .weight = class_weights()}, k_u_w_ls, {});
  check_case("u_soft", x, probs({5}, 0), {.weight = class_weights()}, k_u_soft, {});
}

TEST_CASE("cross_entropy: option errors name what was expected and what came") {
  rg::Tensor x = wave({4, 5});
  CHECK_CONTAINS(
      test::error_of([&] {
        nn::cross_entropy(x, i64({1, 4, 0, 2}), {.weight = f64({1.0, 2.0})});
      }),
      "[cross_entropy] expected weight (5) of the logits' dtype float64 on cpu, got [2] float64");
  CHECK_CONTAINS(test::error_of([&] {
                   nn::cross_entropy(x, probs({4, 4}, 1));
                 }),
                 "[cross_entropy] expected probability targets of the logits' shape [4, 5] and "
                 "dtype float64, got [4, 4] float64");
  CHECK_CONTAINS(
      test::error_of([&] {
        nn::cross_entropy(wave({2, 3, 2}), i64({0, 1, 2}, {3}));
      }),
      "[cross_entropy] expected class-index targets of shape [2, 2] for logits [2, 3, 2], got [3]");
  CHECK_CONTAINS(test::error_of([&] {
                   nn::cross_entropy(wave({5}), rg::full({}, 7.0, {.dtype = rg::kInt64}));
                 }),
                 "[cross_entropy] expected class indices in [0, 5)");
}
