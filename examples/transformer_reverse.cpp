// transformer_reverse.cpp — an encoder–decoder Transformer learns to reverse digit strings.
//
//   source  3 1 4 1 5 9 2 6            (8 to 24 random digits)
//   target  6 2 9 5 1 4 1 3 <eos>
//
// The model is torch.nn.Transformer's shape (nn::Transformer, batch_first) with token
// embeddings plus sinusoidal positions (not scaled by √d_model) and a Linear head over
// the vocabulary.
// Training uses teacher forcing: the decoder reads <bos> + the target shifted right
// under a causal mask and predicts every next token at once; padding is masked out
// of attention (key_padding_mask) and of the loss (ignore_index). The optimizer is
// AdamW with decay on weight matrices only, linear warmup + cosine decay, and global
// gradient-norm clipping. Test: greedy decoding, one token at a time, on 1,000
// held-out strings; a string counts only if every token and the <eos> are right.
//
//   build/bin/transformer_reverse [--steps 1500] [--batch-size 64] [--d-model 64]
//                                 [--layers 2] [--lr 1e-3] [--seed 0] [--threads N]
//                                 [--save PATH [--save-every N]] [--resume PATH] [--max-steps N]
//                                 [--log FILE.jsonl [--log-every 50]]
//                                 [--precision fp32|bf16|fp16]
// --save/--resume: one checkpoint file (model, AdamW, the schedule, both generators, the
// step, under fp16 the GradScaler's state); a resumed run continues exactly (examples/checkpointing.h). --steps is the
// schedule's length; --max-steps stops earlier, to resume later.
// Shows a progress bar on a terminal (plain lines otherwise: examples/progress_bar.h) with
// the mean loss of the last log interval; --log FILE.jsonl writes a JSON line every
// --log-every steps (step, loss, tokens/s, lr, elapsed_s) and a last one with the held-out
// exact match as "accuracy" (examples/metrics_log.h).
// --precision bf16|fp16: PyTorch's AMP recipe (examples/precision.h): the forward, the loss
// and the greedy decoding under rg::autocast (the attention and the linears in 16 bits,
// layer norms, softmax and the loss in float32), backward, clipping and AdamW outside it on
// the float32 master weights; fp16 adds a GradScaler (unscale_ before clipping, as in
// PyTorch). A bf16/fp16 checkpoint resumes only under the same --precision.
// Ends with: RESULT example=transformer_reverse exact_match=… tokens_per_s=… precision=P
#include <ringgrad/ringgrad.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "checkpointing.h"
#include "metrics.h"
#include "metrics_log.h"
#include "precision.h"
#include "progress_bar.h"

namespace rg = ringgrad;

namespace {

// Vocabulary: padding, begin, end, then the digits 0–9.
constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kFirstDigit = 3, kVocab = 13;
constexpr int64_t kMinLen = 8, kMaxLen = 24;

// A batch of reversal problems, padded to the longest source (+1 for <bos>/<eos>).
struct Batch {
  rg::Tensor src;       // (B, S) digit tokens, kPad after each string's end
  rg::Tensor src_pad;   // (B, S) bool: true at padding
  rg::Tensor tgt_in;    // (B, S+1) <bos> + reversed digits
  rg::Tensor tgt_out;   // (B, S+1) reversed digits + <eos>
  rg::Tensor tgt_pad;   // (B, S+1) bool
  int64_t tokens = 0;   // real (non-padding) source + target tokens
};

Batch make_batch(int64_t batch, rg::Generator& gen) {
  std::vector<int64_t> lengths =
      rg::randint(kMinLen, kMaxLen + 1, {batch}, &gen).tolist<int64_t>();
  int64_t s = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> digits = rg::randint(0, 10, {batch, s}, &gen).tolist<int64_t>();
  std::vector<int64_t> src(batch * s, kPad), tin(batch * (s + 1), kPad), tout(batch * (s + 1), kPad);
  Batch b;
  for (int64_t i = 0; i < batch; ++i) {
    int64_t n = lengths[i];
    tin[i * (s + 1)] = kBos;
    for (int64_t j = 0; j < n; ++j) {
      int64_t token = kFirstDigit + digits[i * s + j];
      src[i * s + j] = token;
      tin[i * (s + 1) + n - j] = token;       // reversed, after <bos>
      tout[i * (s + 1) + n - 1 - j] = token;  // reversed
    }
    tout[i * (s + 1) + n] = kEos;
    b.tokens += 2 * n + 1;
  }
  b.src = rg::from_vector(src, {batch, s});
  b.tgt_in = rg::from_vector(tin, {batch, s + 1});
  b.tgt_out = rg::from_vector(tout, {batch, s + 1});
  b.src_pad = b.src == 0.0;
  b.tgt_pad = b.tgt_in == 0.0;
  return b;
}

struct Reverser : rg::nn::Module {
  int64_t d_model;
  rg::nn::Embedding embed;
  rg::nn::PositionalEncoding positions;
  rg::nn::Transformer transformer;
  rg::nn::Linear head;

  Reverser(int64_t d, int64_t layers, double dropout)
      : d_model(d),
        embed(kVocab, d, kPad),
        positions(d, {.dropout = dropout, .max_len = kMaxLen + 2, .batch_first = true}),
        transformer({.d_model = d, .nhead = 4, .num_encoder_layers = layers,
                     .num_decoder_layers = layers, .dim_feedforward = 4 * d, .dropout = dropout,
                     .batch_first = true}),
        head(d, kVocab) {
    register_module("embed", embed);
    register_module("positions", positions);
    register_module("transformer", transformer);
    register_module("head", head);
  }

  rg::Tensor embed_tokens(const rg::Tensor& tokens) {
    return positions(embed(tokens));
  }
  rg::Tensor encode(const Batch& b) {
    return transformer.encoder->forward(embed_tokens(b.src), {.key_padding_mask = b.src_pad});
  }
  // Logits (B, T, vocab) for every position of tgt_in, given the encoder's memory.
  rg::Tensor decode(const rg::Tensor& memory, const rg::Tensor& tgt_in, const rg::Tensor& src_pad,
                    const rg::Tensor& tgt_pad) {
    rg::Tensor h = transformer.decoder->forward(
        embed_tokens(tgt_in), memory,
        {.tgt = {.key_padding_mask = tgt_pad, .is_causal = true},
         .memory = {.key_padding_mask = src_pad}});
    return head(h);
  }
};

// Greedy decoding of a held-out batch; the fraction of strings reversed exactly.
double exact_match(Reverser& model, const Batch& b) {
  rg::NoGradGuard no_grad;
  model.eval();
  const int64_t batch = b.src.size(0), steps = b.tgt_out.size(1);
  rg::Tensor memory = model.encode(b);
  rg::Tensor out = rg::full({batch, 1}, double(kBos), {.dtype = rg::kInt64});
  for (int64_t t = 0; t < steps; ++t) {
    rg::Tensor pad = rg::zeros({batch, t + 1}, {.dtype = rg::kBool});
    rg::Tensor logits = model.decode(memory, out, b.src_pad, pad);    // (B, t+1, V)
    rg::Tensor next = logits.select(1, t).argmax(-1).unsqueeze(1);  // (B, 1)
    out = rg::cat({out, next}, 1);
  }
  model.train();
  // Compare up to and including each string's <eos> (positions after it don't matter).
  std::vector<int64_t> got = out.narrow(1, 1, steps).tolist<int64_t>();
  std::vector<int64_t> want = b.tgt_out.tolist<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < batch; ++i) {
    bool ok = true;
    for (int64_t j = 0; j < steps && ok; ++j) {
      ok = got[i * steps + j] == want[i * steps + j];
      if (want[i * steps + j] == kEos) break;
    }
    correct += ok;
  }
  return double(correct) / double(batch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an encoder-decoder Transformer to reverse digit strings"};
  int64_t steps = 1500, batch_size = 64, d_model = 64, layers = 2, eval_size = 1000;
  double lr = 1e-3, dropout = 0.0, clip = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "strings per step")->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model, "model width (4 heads)")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "encoder and decoder layers")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak AdamW learning rate")->check(CLI::PositiveNumber);
  app.add_option("--dropout", dropout, "dropout in the Transformer");
  app.add_option("--clip", clip, "global gradient-norm clip")->check(CLI::PositiveNumber);
  app.add_option("--eval-size", eval_size, "held-out strings")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed for initialisation and data");
  app.add_option("--threads", threads, "CPU threads (default: RINGGRAD_NUM_THREADS or all cores)");
  Checkpointing ckpt;  // --save --save-every --resume --max-steps (checkpointing.h)
  ckpt.add_options(app);
  LogOptions log_options{.every = 50};  // --log FILE.jsonl --log-every N (metrics_log.h)
  log_options.add_options(app);
  Precision precision;  // --precision fp32|bf16|fp16 (precision.h)
  precision.add_options(app);
  CLI11_PARSE(app, argc, argv);

  try {
    ckpt.check();
    if (threads > 0) rg::set_num_threads(threads);
    rg::manual_seed(seed);
    Reverser model(d_model, layers, dropout);
    rg::optim::AdamW opt(rg::optim::weight_decay_groups(model.named_parameters(), 0.01),
                         {.lr = lr, .beta2 = 0.98, .weight_decay = 0.01});
    rg::optim::WarmupCosine schedule(opt, {.warmup_steps = steps / 10, .total_steps = steps});
    rg::optim::GradScaler scaler({.enabled = precision.scaled()});  // fp16 only
    rg::Generator data_gen(seed + 1), eval_gen(seed + 1000003);  // disjoint streams
    Batch held_out = make_batch(eval_size, eval_gen);
    // What defines this run: a checkpoint resumes only under the same settings.
    std::map<std::string, std::string> run{
        {"steps", std::to_string(steps)},     {"batch_size", std::to_string(batch_size)},
        {"d_model", std::to_string(d_model)}, {"layers", std::to_string(layers)},
        {"lr", std::to_string(lr)},           {"dropout", std::to_string(dropout)},
        {"clip", std::to_string(clip)},       {"seed", std::to_string(seed)}};
    if (precision.mixed()) run["precision"] = precision.name;  // fp32 checkpoints stay as they were
    rg::Checkpoint loaded;
    const rg::TrainProgress at = ckpt.resume(model, opt, 1, run, &schedule, &loaded, &scaler);
    if (!ckpt.resume_path.empty()) {
      auto data = loaded.generators.find("data");
      RG_CHECK(data != loaded.generators.end(), "resume", "'", ckpt.resume_path,
               "': expected the data generator's state (rng.data.*), found none");
      data_gen = data->second;
      std::printf("resumed from %s at step %lld\n", ckpt.resume_path.c_str(),
                  static_cast<long long>(at.step));
    }
    auto save = [&](int64_t step) {
      ckpt.save(model, opt, {.step = step}, 1, run, &schedule, {{"data", data_gen}}, &scaler);
    };
    std::printf("model: %lld parameters, d_model %lld, %lld+%lld layers, %d thread(s)%s\n",
                static_cast<long long>(model.num_parameters()), static_cast<long long>(d_model),
                static_cast<long long>(layers), static_cast<long long>(layers),
                rg::get_num_threads(),
                precision.mixed() ? (", precision " + precision.name).c_str() : "");

    int64_t tokens = 0;
    double seconds = 0;
    const int64_t last = ckpt.max_steps > 0 ? std::min(steps, ckpt.max_steps) : steps;
    ProgressBar bar(/*shown=*/true, /*plain_lines=*/10);
    bar.start("train", steps, at.step, 0, "tokens");
    LossMeter loss_meter;  // the mean loss of each log interval (metrics.h)
    MetricsLog log(log_options.path, /*writer=*/true, /*append=*/!ckpt.resume_path.empty());
    RateMeter rate;
    auto log_line = [&](int64_t step) {
      const double loss = loss_meter.flush(nullptr);
      bar.set_loss(loss);
      return MetricsLog::Line{{"step", step}, {"loss", loss},
                              {"tokens_per_s", std::round(rate.rate(double(tokens)))},
                              {"lr", opt.param_groups()[0].lr}};
    };
    for (int64_t step = at.step + 1; step <= last; ++step) {
      auto start = std::chrono::steady_clock::now();
      Batch b = make_batch(batch_size, data_gen);
      opt.zero_grad();
      rg::Tensor loss;
      {
        rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());  // off for fp32
        rg::Tensor logits = model.decode(model.encode(b), b.tgt_in, b.src_pad, b.tgt_pad);
        loss = rg::nn::cross_entropy(logits.reshape({-1, kVocab}), b.tgt_out.reshape({-1}),
                                     {.ignore_index = kPad});
      }
      scaler.scale(loss).backward();  // fp32/bf16: loss.backward()
      scaler.unscale_(opt);           // clip the true gradients (fp32/bf16: nothing to do)
      rg::optim::clip_grad_norm(model.parameters(), clip);
      scaler.step(opt);  // fp32/bf16: opt.step(); fp16: skipped when a gradient is inf/NaN
      scaler.update();
      schedule.step();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      tokens += b.tokens;
      loss_meter.add(loss.item());
      if (ckpt.due(step)) save(step);
      if (log_options.due(step) && step < last) log.write(log_line(step));  // the last: below
      bar.update(step, double(tokens));
    }
    bar.close();
    if (!ckpt.save_path.empty()) {
      save(std::max(last, at.step));
      ckpt.finish();  // --save-async: on disk before saying so
      std::printf("saved %s (step %lld)\n", ckpt.save_path.c_str(),
                  static_cast<long long>(std::max(last, at.step)));
    }
    MetricsLog::Line line = log_line(std::max(last, at.step));
    auto eval_start = std::chrono::steady_clock::now();
    double match = 0;
    {
      rg::autocast amp(rg::kCPU, precision.dtype(), precision.mixed());
      match = exact_match(model, held_out);
    }
    double eval_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
    line["accuracy"] = match;  // exact match of whole strings, greedy decoding
    log.write(std::move(line));
    std::printf("held-out: %lld strings, greedy decoding in %.1f s, exact match %.4f\n",
                static_cast<long long>(eval_size), eval_seconds, match);
    std::printf("RESULT example=transformer_reverse exact_match=%.4f tokens_per_s=%.0f precision=%s\n",
                match, seconds > 0 ? double(tokens) / seconds : 0.0, precision.name.c_str());
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "transformer_reverse: %s\n", e.what());
    return 1;
  }
  return 0;
}
