// ddp.cpp — DistributedDataParallel, in the order ddp.h tells it:
//   1. broadcast_from_rank0   every replica starts from rank 0's values
//   2. build_buckets          gradients grouped into a few large buffers
//   3. register_hooks         each final gradient goes into its bucket; a full
//                             bucket starts its all-reduce (launch_ready_buckets)
//   4. finish_backward        wait for the buckets, point each .grad at its slice
// The special cases — a world of one, parameters without a gradient, waiting and
// tracing — are small named helpers at the end, so the path above reads as the
// algorithm. (examples/ddp_from_scratch.cpp is the same idea without buckets or overlap.)
//
// 16-bit communication: a bucket holds one dtype, its gradients' (so a bfloat16 model
// sends bfloat16). With a compression hook (DDPOptions::comm_hook, PyTorch's
// bf16_compress_hook) a float32 bucket has a 16-bit twin, `wire`: at launch the bucket
// is rounded into it, the all-reduce moves it, and when it is done it is copied back
// into the float32 bucket (exactly: every 16-bit value is a float32 value).
//
// Traces (core/trace.h): each bucket's launch is an instant on the compute track
// ("bucket 0 launch, 412 KB float32", or "bucket 0 launch, 206 KB bfloat16 (float32
// gradients, bf16_compress_hook)"; its all-reduce is then a slice on the comm track), and the
// end of backward is a "DDP finish" slice whose "wait for all-reduces" child is the
// communication that backward did not hide.
#include "ringgrad/parallel/ddp.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/node.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/trace.h"

namespace ringgrad::parallel {

struct Bucket {
  std::vector<size_t> params;    // indices into State::params, in fill order
  std::vector<int64_t> offsets;  // where each parameter's gradient starts in `flat`
  Tensor flat;                   // all the bucket's gradients, one after another
  Tensor wire;                   // what the all-reduce moves: flat, or its 16-bit twin (a hook)
  int64_t numel = 0;             // gradients it holds (flat and wire are empty in a world of one)
  size_t pending = 0;            // gradients still missing in this backward
  WorkHandle work;               // the all-reduce in flight, if launched
};

struct DistributedDataParallel::State {
  Communicator* comm = nullptr;
  DDPCommHook hook = DDPCommHook::None;
  bool find_unused = false;
  bool grad_as_view = true;
  bool single = false;  // a world of one: gradients are already the global ones
  const bool* sync = nullptr;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of;  // parameter -> bucket
  std::vector<size_t> slot_of;    // parameter -> position in its bucket
  std::vector<Bucket> buckets;
  // per backward
  bool active = false;        // a synchronising backward is under way
  std::vector<bool> ready;    // parameter's gradient is in its bucket
  size_t next_to_launch = 0;  // buckets start strictly in order
  double wait_seconds = 0;    // time backward spent waiting for all-reduces, in total
  int64_t allreduce_bytes = 0;  // bytes handed to all-reduce, in total

  // The slice of a bucket's flat buffer that holds parameter p's gradient.
  Tensor slot(size_t p) {
    Bucket& b = buckets[bucket_of[p]];
    int64_t off = b.offsets[slot_of[p]];
    return b.flat.narrow(0, off, params[p].numel()).view(params[p].shape());
  }

  // 3. Parameter p's gradient is final for this backward: into its bucket,
  // pre-divided by the world size (the all-reduce's sum is then the average).
  void mark_ready(size_t p, const Tensor& grad) {
    if (ready[p]) return;  // one gradient per parameter per backward
    ready[p] = true;
    if (single) return mark_ready_alone(p, grad);
    Tensor dst = slot(p);
    if (grad.defined())
      mul_out(dst, grad, 1.0 / comm->size());
    else
      dst.zero_();  // an unused parameter (find_unused_parameters)
    --buckets[bucket_of[p]].pending;
    launch_ready_buckets();
  }

  // Start every full bucket whose predecessors have all started: every rank then
  // issues the same all-reduces in the same order.
  void launch_ready_buckets() {
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
      size_t index = next_to_launch++;
      Bucket& b = buckets[index];
      trace_launch(index);
      // A compression hook: the bucket rounded to 16 bits is what travels.
      if (compressed(b)) b.wire.copy_(b.flat);
      // A sum of gradients already divided by the world size: the average,
      // without a separate division pass over the bucket (PyTorch does the same).
      b.work = comm->all_reduce_async(b.wire, Reduce::Sum);
      allreduce_bytes += static_cast<int64_t>(b.wire.nbytes());
    }
  }

  // 4. The end of backward: every bucket reduced, each .grad its averaged slice.
  void finish_backward() {
    trace::Span span("DDP finish", "ddp");
    handle_missing_gradients();
    if (!single) {
      wait_for_buckets();
      // Averaged gradients into .grad, where the optimizer looks: the bucket's own
      // slices (no copy), or copies when the user asked for them.
      for (size_t p = 0; p < params.size(); ++p)
        params[p].set_grad(grad_as_view ? slot(p) : slot(p).clone());
    }
    active = false;
  }

  // ---- helpers: the special cases and the bookkeeping around the algorithm

  // The first gradient of a synchronising backward: reset the per-backward
  // state, and have finish_backward run once the whole backward is done.
  void begin_backward() {
    active = true;
    std::fill(ready.begin(), ready.end(), false);
    for (Bucket& b : buckets) b.pending = b.params.size(), b.work.reset();
    next_to_launch = 0;
    autograd::queue_callback([this] { finish_backward(); });
  }

  // A world of one has nothing to average and sends nothing; a parameter
  // without a gradient still gets zeros, as it would in a bigger world.
  void mark_ready_alone(size_t p, const Tensor& grad) {
    if (!grad.defined()) params[p].set_grad(zeros_like(params[p].detach()));
  }

  // Parameters that got no gradient in this backward: an error naming them, or
  // (find_unused_parameters) zeros, so their buckets still complete.
  void handle_missing_gradients() {
    std::vector<std::string> missing;
    for (size_t p = 0; p < params.size(); ++p)
      if (!ready[p]) missing.push_back(names[p]);
    if (!missing.empty() && !find_unused) {
      // Let the buckets already started finish (their buffers must outlive them).
      for (Bucket& b : buckets)
        if (b.work) b.work->wait();
      active = false;
      std::string list;
      for (const std::string& n : missing) list += (list.empty() ? "" : ", ") + n;
      fail("DistributedDataParallel",
           "expected a gradient for every parameter in each backward, got none for: ", list,
           " (construct DDP with {.find_unused_parameters = true} if that is intended)");
    }
    for (size_t p = 0; p < params.size(); ++p)
      if (!ready[p]) mark_ready(p, Tensor());
  }

  // Wait for every bucket's all-reduce, in launch order, and count the time:
  // the communication that backward did not hide (comm_wait_seconds).
  void wait_for_buckets() {
    auto start = std::chrono::steady_clock::now();
    {
      trace::Span wait("wait for all-reduces", "ddp");
      for (Bucket& b : buckets) {
        b.work->wait();
        if (compressed(b)) b.flat.copy_(b.wire);  // the 16-bit average, back in float32
      }
    }
    wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // A bucket whose all-reduce moves a 16-bit twin of it (a compression hook).
  static bool compressed(const Bucket& b) { return b.wire.raw_data() != b.flat.raw_data(); }

  // "bucket 2 launch, 206 KB bfloat16 (float32 gradients, bf16_compress_hook)": the
  // size and dtype on the wire, and where they differ from the gradients', why.
  void trace_launch(size_t index) const {
    if (!trace::enabled()) return;
    const Bucket& b = buckets[index];
    const double bytes = static_cast<double>(b.wire.nbytes());
    std::string name = "bucket " + std::to_string(index) + " launch, " +
                       trace::format_bytes(bytes) + " " + dtype_name(b.wire.dtype());
    if (compressed(b))
      name += std::string(" (") + dtype_name(b.flat.dtype()) + " gradients, " +
              comm_hook_name(hook) + ")";
    trace::instant(std::move(name), "ddp",
                   {trace::arg("bucket", static_cast<double>(index)),
                    trace::arg("bytes", bytes),
                    trace::arg("dtype", std::string(dtype_name(b.wire.dtype()))),
                    trace::arg("gradient_dtype", std::string(dtype_name(b.flat.dtype()))),
                    trace::arg("parameters", static_cast<double>(b.params.size()))});
  }
};

namespace {

// 1. Every replica starts from rank 0's values (parameters and buffers).
bool ignored(const std::string& name, const DDPOptions& options) {
  const auto& names = options.ignored_parameters;
  return std::find(names.begin(), names.end(), name) != names.end();
}

void broadcast_from_rank0(nn::Module& module, Communicator& comm, const DDPOptions& options) {
  NamedTensors named;
  for (auto& [name, t] : module.state_dict())
    if (!ignored(name, options)) named.emplace_back(name, t);
  check_same_layout_across_ranks(comm, named, "the model (DistributedDataParallel's replicas)");
  std::vector<Tensor> state;
  for (auto& [name, t] : named) state.push_back(t);
  broadcast_tensors(comm, state, 0);
}

// The dtype a bucket of `dtype` gradients travels in: 16 bits under a compression hook.
DType wire_dtype(DType dtype, DDPCommHook hook) {
  if (hook == DDPCommHook::None || element_size(dtype) <= 2 || !is_floating(dtype)) return dtype;
  return hook == DDPCommHook::BF16Compress ? kBFloat16 : kFloat16;
}

// 2. Buckets, filled in reverse registration order (roughly the order backward
// produces gradients); the first one small so communication starts early. A bucket
// is one tensor, so it holds one dtype: each dtype fills buckets of its own (as
// PyTorch's compute_bucket_assignment_by_size), its first one small too.
void build_buckets(DistributedDataParallel::State& s, nn::Module& module, Communicator& comm,
                   const DDPOptions& options) {
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad() && !ignored(name, options)) s.names.push_back(name), s.params.push_back(p);
  s.bucket_of.resize(s.params.size());
  s.slot_of.resize(s.params.size());
  s.ready.assign(s.params.size(), false);
  struct Filling {
    size_t bucket;  // the bucket this dtype is filling
    double bytes, cap;
  };
  std::map<DType, Filling> filling;
  for (size_t k = s.params.size(); k-- > 0;) {
    const Tensor& p = s.params[k];
    const double nbytes = static_cast<double>(p.nbytes());
    auto it = filling.find(p.dtype());
    if (it == filling.end()) {  // this dtype's first bucket: small
      s.buckets.emplace_back();
      it = filling.emplace(p.dtype(), Filling{s.buckets.size() - 1, 0,
                                              options.first_bucket_cap_mb * 1e6}).first;
    } else if (it->second.bytes + nbytes > it->second.cap) {  // full: the next one
      s.buckets.emplace_back();
      it->second = Filling{s.buckets.size() - 1, 0, options.bucket_cap_mb * 1e6};
    }
    Bucket& b = s.buckets[it->second.bucket];
    s.bucket_of[k] = it->second.bucket;
    s.slot_of[k] = b.params.size();
    b.offsets.push_back(b.params.empty() ? 0
                                         : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    it->second.bytes += nbytes;
  }
  for (Bucket& b : s.buckets) {
    const Tensor& last = s.params[b.params.back()];
    int64_t numel = b.offsets.back() + last.numel();
    const DType wire = wire_dtype(last.dtype(), options.comm_hook);
    b.numel = numel;
    if (s.single) {  // nothing to average or send: no memory, only the bucket's layout and dtypes
      b.flat = empty({0}, {.dtype = last.dtype(), .device = last.device()});
      b.wire = wire == last.dtype() ? b.flat : empty({0}, {.dtype = wire, .device = last.device()});
      continue;
    }
    // Symmetric memory for what the all-reduce moves: on one host, it reads the
    // peers' buckets directly (Communicator::symmetric_empty); elsewhere ordinary
    // memory. Every rank builds the same buckets in the same order, as that requires.
    // With a compression hook the float32 bucket itself is ordinary memory.
    if (wire == last.dtype()) {
      b.flat = comm.symmetric_empty({numel}, {.dtype = wire, .device = last.device()});
      b.wire = b.flat;
    } else {
      b.flat = empty({numel}, {.dtype = last.dtype(), .device = last.device()});
      b.wire = comm.symmetric_empty({numel}, {.dtype = wire, .device = last.device()});
      b.wire.zero_();
    }
    b.flat.zero_();
  }
}

// 3. A hook per parameter: "my gradient is final for this backward".
void register_hooks(const std::shared_ptr<DistributedDataParallel::State>& state) {
  std::weak_ptr<DistributedDataParallel::State> weak = state;
  for (size_t k = 0; k < state->params.size(); ++k) {
    state->params[k].register_post_accumulate_grad_hook([weak, k](Tensor& p) {
      auto s = weak.lock();
      if (!s || !*s->sync) return;  // DDP gone, or inside no_sync(): accumulate locally
      if (!s->active) s->begin_backward();
      s->mark_ready(k, p.grad());
    });
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, Communicator& comm,
                                                 DDPOptions options)
    : module_(module), comm_(comm), options_(options), state_(std::make_shared<State>()) {
  RG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0, "DistributedDataParallel",
           "expected positive bucket caps, got ", options.first_bucket_cap_mb, " and ",
           options.bucket_cap_mb, " MB");
  State& s = *state_;
  s.comm = &comm;
  s.hook = options.comm_hook;
  s.find_unused = options.find_unused_parameters;
  s.grad_as_view = options.gradient_as_bucket_view;
  s.single = comm.size() == 1;
  s.sync = &sync_;

  for (const std::string& name : options.ignored_parameters) {
    bool found = false;
    for (const auto& [own, p] : module.named_parameters()) found = found || own == name;
    RG_CHECK(found, "DistributedDataParallel", "expected ignored_parameters to name parameters of ",
             "the module, got '", name, "'");
  }
  broadcast_from_rank0(module, comm, options);  // 1.
  build_buckets(s, module, comm, options);  // 2.
  register_hooks(state_);                   // 3. (4. runs at the end of each backward)
}

DistributedDataParallel::~DistributedDataParallel() = default;

double DistributedDataParallel::comm_wait_seconds() const { return state_->wait_seconds; }

size_t DistributedDataParallel::num_buckets() const { return state_->buckets.size(); }

DistributedDataParallel::BucketInfo DistributedDataParallel::bucket_info(size_t i) const {
  RG_CHECK(i < state_->buckets.size(), "bucket_info", "expected a bucket below ",
           state_->buckets.size(), ", got ", i);
  const Bucket& b = state_->buckets[i];
  return {b.flat.dtype(), b.wire.dtype(), b.numel * static_cast<int64_t>(element_size(b.wire.dtype()))};
}

int64_t DistributedDataParallel::allreduce_bytes() const { return state_->allreduce_bytes; }

const char* comm_hook_name(DDPCommHook hook) {
  switch (hook) {
    case DDPCommHook::None:
      return "allreduce_hook";
    case DDPCommHook::BF16Compress:
      return "bf16_compress_hook";
    case DDPCommHook::FP16Compress:
      return "fp16_compress_hook";
  }
  return "?";
}

std::vector<std::string> DistributedDataParallel::bucket_parameters(size_t i) const {
  RG_CHECK(i < state_->buckets.size(), "bucket_parameters", "expected a bucket below ",
           state_->buckets.size(), ", got ", i);
  std::vector<std::string> names;
  for (size_t p : state_->buckets[i].params) names.push_back(state_->names[p]);
  return names;
}

}  // namespace ringgrad::parallel
