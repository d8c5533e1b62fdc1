// test_nccl_parallel.cpp — the parallel features and the mixed-precision tools as a world
// of one on one GPU through NCCL, against the same steps on the CPU.
//
// A world of one cannot show a sum across ranks, but it runs every collective each
// feature issues (ZeRO-2's reduce, tensor parallelism's all-reduces, ring attention's
// transfers, Ulysses' all-to-all) through real NCCL on CUDA memory, in the order and on
// the streams the feature uses them. Each case first runs on the CPU twice — the plain
// model, and the feature over a CPU world of one — so that the case itself is checked on
// every machine; then, where a GPU is, the feature on cuda:0 through NCCL, whose results
// must equal the CPU's (float32: within a few rounding steps, the GPU sums in another
// order). Without a GPU the GPU half says "SKIPPED: no CUDA device" (scripts/gpu-check
// fails on that line: there, every case must have run on the GPU).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringgrad/parallel/context_parallel.h"
#include "ringgrad/parallel/expert_parallel.h"
#include "ringgrad/parallel/nccl/nccl_communicator.h"
#include "ringgrad/parallel/tensor_parallel.h"
#include "ringgrad/parallel/zero.h"
#include "test_helpers.h"

namespace par = rg::parallel;

namespace {

using Results = std::vector<rg::Tensor>;  // on the CPU
using Run = std::function<Results(rg::Device, par::Communicator&)>;

double max_diff(const Results& a, const Results& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].shape() == b[i].shape());
    worst = std::max(worst, rg::amax(rg::abs(a[i].to(rg::kFloat64) - b[i].to(rg::kFloat64))).item());
  }
  return worst;
}

Results on_cpu(std::vector<rg::Tensor> ts) {
  for (rg::Tensor& t : ts) t = t.detach().to(rg::kCPU);
  return ts;
}

// `run` over the CPU's world of one against `plain` (within cpu_tol), then over cuda:0's
// NCCL communicator against the CPU's run (within gpu_tol).
void cpu_then_gpu(const std::string& what, const Results& plain, const Run& run,
                  double cpu_tol, double gpu_tol) {
  auto single = par::make_single_communicator();
  const Results cpu = run(rg::kCPU, *single);
  const double on_cpu_diff = max_diff(cpu, plain);
  CHECK_MESSAGE(on_cpu_diff <= cpu_tol, what << " on the CPU: max diff " << on_cpu_diff);
  if (!(par::nccl_is_built() && rg::cuda::is_available())) {
    MESSAGE("SKIPPED: no CUDA device: " << what << " ran on the CPU only");
    return;
  }
  auto nccl = par::make_nccl_communicator(*single, 0);
  const Results gpu = run(rg::Device::cuda(0), *nccl);
  const double on_gpu_diff = max_diff(gpu, cpu);
  CHECK_MESSAGE(on_gpu_diff <= gpu_tol, what << " on cuda:0 through NCCL: max diff " << on_gpu_diff);
  MESSAGE(what << ": cuda:0 through NCCL within " << on_gpu_diff << " of the CPU");
}

std::shared_ptr<rg::nn::Sequential> mlp(rg::Device device) {
  rg::manual_seed(3);
  auto m = std::make_shared<rg::nn::Sequential>(std::initializer_list<std::shared_ptr<rg::nn::Module>>{
      std::make_shared<rg::nn::Linear>(6, 7), std::make_shared<rg::nn::GELU>(),
      std::make_shared<rg::nn::Linear>(7, 3)});
  m->to(device);
  return m;
}

// Three AdamW steps of mlp() on a square loss; `step` and `zero` are the optimizer's.
Results train_mlp(rg::nn::Module& model, rg::Device device, const std::function<void()>& step,
                  const std::function<void()>& zero) {
  rg::Generator data(1);
  for (int i = 0; i < 3; ++i) {
    rg::Tensor x = rg::randn({5, 6}, {}, &data).to(device);
    zero();
    model(x).pow(2).mean().backward();
    step();
  }
  return on_cpu(model.parameters());
}

std::unique_ptr<rg::optim::Optimizer> adamw(std::vector<rg::Tensor> params) {
  return std::make_unique<rg::optim::AdamW>(params, rg::optim::AdamWOptions{.lr = 1e-2});
}

}  // namespace

TEST_CASE("nccl: ZeRO-2 on one device trains as the plain model does") {
  auto plain = mlp(rg::kCPU);
  auto plain_opt = adamw(plain->parameters());
  const Results want = train_mlp(*plain, rg::kCPU, [&] { plain_opt->step(); },
                                 [&] { plain_opt->zero_grad(); });
  cpu_then_gpu("ZeRO-2 (reduce to the owner)", want,
               [](rg::Device device, par::Communicator& comm) {
                 auto model = mlp(device);
                 par::ZeroRedundancyOptimizer opt(model->parameters(), comm, adamw, {.stage = 2});
                 return train_mlp(*model, device, [&] { opt.step(); }, [&] { opt.zero_grad(); });
               },
               0.0, 1e-5);
}

TEST_CASE("nccl: a tensor-parallel MLP on one device equals the plain layers") {
  // Megatron's MLP: column-parallel fc1, GELU, row-parallel fc2; its output and every
  // parameter's gradient.
  auto layers = [](rg::Device device) {
    rg::manual_seed(5);
    auto fc1 = std::make_shared<rg::nn::Linear>(6, 8), fc2 = std::make_shared<rg::nn::Linear>(8, 4);
    fc1->to(device), fc2->to(device);
    return std::make_pair(fc1, fc2);
  };
  rg::Generator data(2);
  const rg::Tensor x = rg::randn({5, 6}, {}, &data);
  auto [fc1, fc2] = layers(rg::kCPU);
  rg::Tensor y_plain = (*fc2)(rg::gelu((*fc1)(x)));
  y_plain.pow(2).sum().backward();
  const Results want = on_cpu({y_plain, fc1->weight.grad(), fc1->bias.grad(), fc2->weight.grad(),
                               fc2->bias.grad()});
  cpu_then_gpu("column + row parallel Linear", want,
               [&](rg::Device device, par::Communicator& tp) {
                 auto [w1, w2] = layers(device);
                 par::ColumnParallelLinear col(*w1, tp);
                 par::RowParallelLinear row(*w2, tp, {.input_is_parallel = true});
                 rg::Tensor y = row(rg::gelu(col(x.to(device))));
                 y.pow(2).sum().backward();
                 return on_cpu({y, col.weight.grad(), col.bias.grad(), row.weight.grad(),
                                row.bias.grad()});
               },
               1e-6, 1e-5);
}

TEST_CASE("nccl: an expert-parallel MoE on one device equals the plain layer") {
  // The counts' all-to-all, dispatch and combine (the all-to-all with counts) in forward
  // and backward; the output, the input's and every parameter's gradient.
  auto layer = [](rg::Device device) {
    rg::manual_seed(9);
    auto m = std::make_shared<rg::nn::MoE>(6, rg::nn::MoEOptions{.num_experts = 4, .top_k = 2,
                                                                  .hidden = 8, .shared_experts = 1,
                                                                  .capacity_factor = 1.0});
    m->to(device);
    return m;
  };
  auto grad_or_zeros = [](const rg::Tensor& w) {  // (an expert no token chose has none)
    return w.grad().defined() ? w.grad().to(rg::kCPU) : rg::zeros(w.shape());
  };
  rg::Generator data(4);
  const rg::Tensor x = rg::randn({10, 6}, {}, &data);
  auto plain = layer(rg::kCPU);
  rg::Tensor xp = x.clone().requires_grad_();
  rg::nn::MoEOutput p = plain->forward_moe(xp);
  (p.output.pow(2).sum() + p.aux_loss).backward();
  Results want = on_cpu({p.output, xp.grad()});
  for (const rg::Tensor& w : plain->parameters()) want.push_back(grad_or_zeros(w));
  cpu_then_gpu("expert-parallel MoE", want,
               [&](rg::Device device, par::Communicator& ep) {
                 auto whole = layer(device);
                 par::ExpertParallelMoE moe(*whole, ep);
                 rg::Tensor xd = x.to(device).requires_grad_();
                 rg::nn::MoEOutput o = moe.forward_moe(xd);
                 (o.output.pow(2).sum() + o.aux_loss).backward();
                 Results got = on_cpu({o.output, xd.grad()});
                 for (const rg::Tensor& w : moe.parameters()) got.push_back(grad_or_zeros(w));
                 return got;
               },
               1e-6, 1e-5);
}

TEST_CASE("nccl: context-parallel attention on one device equals plain attention") {
  // Causal self-attention of a MultiheadAttention in a context_parallel region, by each
  // method (the ring's transfers, the all-gather's, Ulysses' all-to-all): the output and
  // every parameter's gradient.
  using Method = par::ContextParallelMethod;
  rg::Generator data(4);
  const rg::Tensor x = rg::randn({2, 8, 12}, {}, &data);
  auto mha_on = [](rg::Device device) {
    rg::manual_seed(6);
    auto m = std::make_shared<rg::nn::MultiheadAttention>(
        12, 3, rg::nn::MultiheadAttentionOptions{.batch_first = true});
    m->to(device);
    return m;
  };
  auto mha = mha_on(rg::kCPU);
  rg::Tensor y_plain = (*mha)(x, x, x, {.is_causal = true});
  y_plain.pow(2).sum().backward();
  Results want{y_plain.detach()};
  for (const rg::Tensor& p : mha->parameters()) want.push_back(p.grad().clone());
  for (Method method : {Method::Ring, Method::AllGather, Method::Ulysses}) {
    const char* name = method == Method::Ring        ? "ring attention"
                       : method == Method::AllGather ? "all-gather attention"
                                                     : "Ulysses attention";
    cpu_then_gpu(name, want,
                 [&](rg::Device device, par::Communicator& cp_comm) {
                   auto m = mha_on(device);
                   rg::Tensor xs = x.to(device);
                   rg::Tensor y;
                   {
                     auto cp = par::context_parallel(cp_comm, {&xs}, {1},
                                                     {.causal = true, .method = method});
                     y = (*m)(xs, xs, xs, {.is_causal = true});
                     y.pow(2).sum().backward();
                   }
                   Results r{y};
                   for (const rg::Tensor& p : m->parameters()) r.push_back(p.grad());
                   return on_cpu(r);
                 },
                 1e-5, 1e-5);
  }
}

TEST_CASE("nccl: autocast and GradScaler on one device step as on the CPU") {
  // Four steps of mlp() under autocast (bfloat16, then float16 with a GradScaler; the
  // first step's inputs are so large that float16 overflows: that step is skipped and
  // the scale backs off): 16-bit GEMMs, the casts' gradients, unscale_'s inf check and
  // the skipped step all on the device.
  for (rg::DType low : {rg::kBFloat16, rg::kFloat16}) {
    auto run = [low](rg::Device device, par::Communicator&) {
      auto model = mlp(device);
      auto opt = adamw(model->parameters());
      rg::optim::GradScaler scaler({.enabled = low == rg::kFloat16});
      rg::Generator data(7);
      Results r;
      for (int i = 0; i < 4; ++i) {
        rg::Tensor x = (rg::randn({5, 6}, {}, &data) * (i == 0 ? 300.0 : 1.0)).to(device);
        opt->zero_grad();
        rg::Tensor loss;
        {
          rg::autocast guard(device, low);
          loss = (*model)(x).pow(2).mean();
        }
        scaler.scale(loss).backward();
        scaler.step(*opt);
        scaler.update();
        r.push_back(rg::scalar_tensor(scaler.get_scale()));
      }
      for (rg::Tensor& p : model->parameters()) r.push_back(p);
      return on_cpu(r);
    };
    auto single = par::make_single_communicator();
    const Results want = run(rg::kCPU, *single);
    if (low == rg::kFloat16) {  // the case is what it claims: the first step overflowed
      CHECK(want[0].item() == 32768.0);
      CHECK(want[3].item() == 32768.0);
    }
    // The GPU's 16-bit GEMMs round in another order: a few bfloat16 steps on the parameters.
    cpu_then_gpu(low == rg::kBFloat16 ? "autocast bf16" : "autocast fp16 + GradScaler", want, run,
                 0.0, low == rg::kBFloat16 ? 2e-2 : 5e-3);
  }
}
