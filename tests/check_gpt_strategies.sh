#!/usr/bin/env bash
# check_gpt_strategies.sh — the GPT example trains the same run under every strategy.
#
#   tests/check_gpt_strategies.sh RGRUN GPT [ARGS...]
#
# At world 2 a small GPT trains 20 steps under ddp, zero1, zero2, fsdp, fsdp with context
# parallelism (--dp 1 --cp 2, one replica of twice the sequences), ddp with tensor
# parallelism (--tp 2), and at world 4 ddp with pipeline x tensor parallelism (1F1B,
# ZB-H1 and interleaved), Llama's blocks under tp 2, pp 2 x tp 2 and cp 2 x tp 2, and
# bf16 and fp16 autocast through the pipeline (each against one process in its precision),
# zero1 under pp 2 and tp 2 (fp32 and fp16, its checkpoints moving to and from ddp and fsdp);
# sequence parallelism (tp 2, pp 2 x tp 2, zero1 dp 2 x tp 2, Llama's under pp and cp, bf16);
# each prints its training loss at step 20 and
# its validation loss (the train loss is the mean over steps 11-20). All are the same computation up to the order of float32 sums,
# so every loss must agree with DDP's within 1e-4 (relative). Then a checkpoint
# moves between strategies: fsdp trains 10 steps and saves, zero2 resumes to step 20,
# and must end where DDP's straight 20 steps ended (the batches depend only on the
# step, and model and AdamW state travel whole), and between fsdp, ddp and pp 2 x tp 2
# (in the same layout: the same bytes as never stopping). Then a Mixture of Experts run in one
# process against ddp, zero2, fsdp, expert parallelism (ep 2 at world 2 and 4, with
# accumulation, and with tp 2, pp 2, cp 2, pp 2 x cp 2 at world 8, and all five dimensions
# at world 16 with sequence parallelism), recomputation, tp 2 (with and without sequence
# parallelism) and pp 2 x tp 2, cp 2 (with capacity, and dropless), and through checkpoints (fsdp saves
# at step 10, ddp, ep 2 and dp 2 x ep 2 x tp 2 resume; ep 2 and dp 2 x ep 2 x pp 2 save, one
# process resumes; the latter resumed in its own layout ends with the same bytes).
# ctest runs it as example_gpt_strategies_2.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RGRUN GPT [ARGS...]" >&2; exit 2; }
rgrun=$1 gpt=$2
shift 2
small=(--steps 20 --layers 2 --d-model 64 --heads 4 --seq 64 --batch-size 4 --eval-every 20
       --eval-batches 2 --log-every 10 --sample-length 20 "$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# losses (one run's "train val") and close (within 1e-4 of the reference)
source "$(dirname "$0")/gpt_losses.sh"

reference=$(losses --strategy ddp)
echo "ddp                          train ${reference% *}  val ${reference#* }"
status=0
for s in zero1 zero2 fsdp; do
  close "$s" "$reference" "$(losses --strategy "$s")" || status=1
done
# One replica of 8 sequences, each shared by 2 ranks: the same 8 windows per step.
close "fsdp, dp 1 x cp 2" "$reference" "$(losses --strategy fsdp --dp 1 --cp 2 --batch-size 8)" || status=1
# Tensor parallelism (heads, MLP, vocabulary split over 2 ranks), then tensor x pipeline
# parallelism on 4 ranks (2 stages, 4 micro-batches): one replica of the same 8 sequences.
close "ddp, tp 2" "$reference" "$(losses --dp 1 --tp 2 --batch-size 8)" || status=1
close "ddp, pp 2 x tp 2 (world 4)" "$reference" \
  "$(losses -n 4 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4)" || status=1
# The same pipeline under the zero-bubble schedule (weight gradients deferred into the waits).
close "ddp, pp 2 x tp 2, zb-h1 (world 4)" "$reference" \
  "$(losses -n 4 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --schedule zb-h1)" || status=1
# The generated sample of a pipeline run: the stages' parts gathered on rank 0, the same
# text as one process's (greedy: --top-k 1).
sample_of() {  # the sample's lines of one run
  "$rgrun" "$@" 2>&1 | sed -n '/^sample (/,/^RESULT/p' | grep -v '^RESULT'
}
one=$(sample_of -n 1 "$gpt" "${small[@]}" --batch-size 8 --sample-length 40 --top-k 1)
piped=$(sample_of -n 4 "$gpt" "${small[@]}" --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --sample-length 40 --top-k 1)
if [ -n "$one" ] && [ "$one" = "$piped" ]; then
  echo "sample, pp 2 x tp 2 (world 4): the one-process text"
else
  printf 'FAILED: the pp 2 x tp 2 sample differs from one process'"'"'s:\n%s\n--- against ---\n%s\n' "$one" "$piped" >&2
  status=1
fi
# Interleaved 1F1B: 4 blocks, each rank holding 2 chunks of one block (stages r and r + 2).
close "ddp, pp 2 x tp 2, interleaved v 2 (world 4, 4 layers)" "$(losses --strategy ddp --layers 4)" \
  "$(losses -n 4 --layers 4 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --schedule interleaved)" || status=1
"$rgrun" -n 2 "$gpt" "${small[@]}" --strategy fsdp --save "$dir/ckpt" --max-steps 10 \
  > "$dir/save.log" 2>&1 || { cat "$dir/save.log" >&2; echo "FAILED: fsdp --save" >&2; exit 1; }
close "fsdp 10 steps, zero2 resumes" "$reference" "$(losses --strategy zero2 --resume "$dir/ckpt")" || status=1
# Checkpoints across layouts (gpt/stage_state.h): the stages' tp slices put together into
# the one-file form, and cut again: fsdp's resumes under pp 2 x tp 2, pp 2 x tp 2's under
# ddp; and in the same layout a resumed run's final checkpoint is the uninterrupted one's,
# byte for byte.
pipe=(--dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4)
close "fsdp 10 steps, pp 2 x tp 2 resumes" "$reference" "$(losses -n 4 "${pipe[@]}" --resume "$dir/ckpt")" || status=1
"$rgrun" -n 4 "$gpt" "${small[@]}" "${pipe[@]}" --save "$dir/pipe-half" --max-steps 10 > "$dir/pipe.log" 2>&1 ||
  { cat "$dir/pipe.log" >&2; echo "FAILED: pp 2 x tp 2 --save" >&2; exit 1; }
close "pp 2 x tp 2 10 steps, ddp resumes" "$reference" "$(losses --strategy ddp --resume "$dir/pipe-half")" || status=1
"$rgrun" -n 4 "$gpt" "${small[@]}" "${pipe[@]}" --resume "$dir/pipe-half" --save "$dir/pipe-resumed" > "$dir/pipe.log" 2>&1 &&
  "$rgrun" -n 4 "$gpt" "${small[@]}" "${pipe[@]}" --save "$dir/pipe-whole" > "$dir/pipe.log" 2>&1 ||
  { cat "$dir/pipe.log" >&2; echo "FAILED: pp 2 x tp 2 --resume/--save" >&2; exit 1; }
if cmp -s "$dir/pipe-resumed" "$dir/pipe-whole"; then
  echo "pp 2 x tp 2 10 + 10 steps       the uninterrupted run's checkpoint, byte for byte"
else
  echo "FAILED: pp 2 x tp 2 resumed at step 10 ends with another checkpoint than 20 steps straight" >&2
  status=1
fi
# zero1 under 4D (Megatron's distributed optimizer, by whole tensors): each of the dp ranks
# steps its share of the stage's parameters and broadcasts them; the norm summed over owners.
# Its checkpoint gathers the shares into the one-file form: ddp resumes it, and it resumes
# fsdp's.
close "zero1, dp 2 x pp 2 (world 4)" "$reference" \
  "$(losses -n 4 --strategy zero1 --dp 2 --pp 2 --batch-size 4 --micro-batches 2)" || status=1
zero_pipe=(--strategy zero1 --dp 2 --tp 2 --batch-size 4)
"$rgrun" -n 4 "$gpt" "${small[@]}" "${zero_pipe[@]}" --save "$dir/zero-half" --max-steps 10 > "$dir/zero.log" 2>&1 ||
  { cat "$dir/zero.log" >&2; echo "FAILED: zero1 dp 2 x tp 2 --save" >&2; exit 1; }
close "zero1 dp 2 x tp 2 10 steps, ddp resumes" "$reference" "$(losses --strategy ddp --resume "$dir/zero-half")" || status=1
close "fsdp 10 steps, zero1 dp 2 x tp 2 resumes" "$reference" \
  "$(losses -n 4 "${zero_pipe[@]}" --resume "$dir/ckpt")" || status=1
close "fp16, zero1 dp 2 x pp 2 (world 4)" "$(losses -n 1 --precision fp16 --batch-size 8)" \
  "$(losses -n 4 --precision fp16 --strategy zero1 --dp 2 --pp 2 --batch-size 4 --micro-batches 2)" || status=1
# Llama's blocks (RMSNorm, rotary q/k, SwiGLU, 2 K/V heads of 4) split the same ways: the
# query and K/V heads and SwiGLU's hidden units over tp, the blocks over pp, the sequences'
# positions (rotated by their global ones) over cp; one process's losses.
llama=(--norm rmsnorm --pos rope --mlp swiglu --kv-heads 2)
llama_reference=$(losses -n 1 "${llama[@]}" --batch-size 8)
echo "llama, one process           train ${llama_reference% *}  val ${llama_reference#* }"
close "llama, tp 2" "$llama_reference" "$(losses "${llama[@]}" --dp 1 --tp 2 --batch-size 8)" || status=1
close "llama, pp 2 x tp 2 (world 4)" "$llama_reference" \
  "$(losses -n 4 "${llama[@]}" --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --schedule zb-h1)" || status=1
close "llama, cp 2 x tp 2 (world 4)" "$llama_reference" \
  "$(losses -n 4 "${llama[@]}" --dp 1 --cp 2 --tp 2 --batch-size 8)" || status=1
# Sequence parallelism: between the split layers each tp rank keeps its half of the
# positions (norms, residuals, the pipeline's sends, a recomputed block's input), the norms'
# and row biases' gradients summed over tp: still one process's losses.
close "sp, tp 2" "$reference" "$(losses --dp 1 --tp 2 --batch-size 8 --sequence-parallel)" || status=1
close "sp, pp 2 x tp 2 zb-h1 (world 4)" "$reference" \
  "$(losses -n 4 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --schedule zb-h1 --sequence-parallel)" || status=1
close "sp, zero1 dp 2 x tp 2 (world 4)" "$reference" \
  "$(losses -n 4 --strategy zero1 --dp 2 --tp 2 --sequence-parallel --recompute full)" || status=1
close "llama, sp, pp 2 x tp 2 (world 4)" "$llama_reference" \
  "$(losses -n 4 "${llama[@]}" --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --sequence-parallel)" || status=1
close "llama, sp, cp 2 x tp 2 (world 4)" "$llama_reference" \
  "$(losses -n 4 "${llama[@]}" --dp 1 --cp 2 --tp 2 --batch-size 8 --sequence-parallel --recompute selective)" ||
  status=1
# Autocast inside the pipeline's chunks (their backward run by the schedule, outside it),
# the loss in float32, fp16's scale and its skipped steps agreed over every rank.
bf16_reference=$(losses -n 1 --precision bf16 --batch-size 8)
close "bf16, pp 2 x tp 2 (world 4)" "$bf16_reference" \
  "$(losses -n 4 --precision bf16 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4)" || status=1
close "bf16, sp, pp 2 x tp 2 (world 4)" "$bf16_reference" \
  "$(losses -n 4 --precision bf16 --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4 --sequence-parallel)" ||
  status=1
close "fp16, pp 2 zb-h1, llama" "$(losses -n 1 --precision fp16 "${llama[@]}" --batch-size 8)" \
  "$(losses --precision fp16 "${llama[@]}" --dp 1 --pp 2 --batch-size 8 --micro-batches 4 --schedule zb-h1)" || status=1
# Experts (an MoE in every other block, one shared, capacity 1.25): every sequence is one
# routing group, so every layout routes and drops as one process does; the load-balance
# loss rides backward from the block (recomputed blocks and pipeline stages included).
moe=(--experts 4 --experts-per-token 2 --shared-experts 1 --capacity-factor 1.25 --moe-every 2)
moe_reference=$(losses -n 1 "${moe[@]}" --batch-size 8)
echo "experts, one process         train ${moe_reference% *}  val ${moe_reference#* }"
for s in ddp zero2 fsdp; do
  close "experts, $s" "$moe_reference" "$(losses "${moe[@]}" --strategy "$s")" || status=1
done
close "experts, ep 2" "$moe_reference" "$(losses "${moe[@]}" --ep 2)" || status=1
close "experts, ep 2, accumulation 2" "$moe_reference" "$(losses "${moe[@]}" --ep 2 --batch-size 2 --grad-accum 2)" || status=1
close "experts, recompute full" "$moe_reference" "$(losses "${moe[@]}" --recompute full)" || status=1
# Context parallelism cuts each sequence over 2 ranks: the statistics are summed over them,
# and capacity gives places in the whole sequence's order (the same tokens dropped).
close "experts, fsdp, cp 2" "$moe_reference" \
  "$(losses "${moe[@]}" --strategy fsdp --dp 1 --cp 2 --batch-size 8)" || status=1
dropless=(--experts 4 --experts-per-token 2 --shared-experts 1 --moe-every 2)
dropless_reference=$(losses -n 1 "${dropless[@]}" --batch-size 8)
close "experts dropless, ep 2 x cp 2 (world 4)" "$dropless_reference" \
  "$(losses -n 4 "${dropless[@]}" --dp 2 --cp 2 --ep 2 --batch-size 4)" || status=1
close "experts, dp 2 (ep 2) x pp 2 x cp 2 (world 8)" "$moe_reference" \
  "$(losses -n 8 "${moe[@]}" --dp 2 --pp 2 --cp 2 --ep 2 --batch-size 4 --micro-batches 2)" || status=1
# All five dimensions at once: dp 2 (the experts split over it), pp 2, cp 2, tp 2 with
# sequence parallelism (each tp rank routes its quarter of a sequence).
close "experts, 5D, sp (world 16)" "$moe_reference" \
  "$(losses -n 16 "${moe[@]}" --dp 2 --pp 2 --cp 2 --tp 2 --ep 2 --batch-size 4 --micro-batches 2 \
     --sequence-parallel)" || status=1
close "experts, tp 2" "$moe_reference" "$(losses "${moe[@]}" --dp 1 --tp 2 --batch-size 8)" || status=1
close "experts, sp tp 2" "$moe_reference" "$(losses "${moe[@]}" --dp 1 --tp 2 --batch-size 8 --sequence-parallel)" || status=1
close "experts, pp 2 x tp 2 (world 4)" "$moe_reference" \
  "$(losses -n 4 "${moe[@]}" --dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4)" || status=1
close "experts, dp 4 with ep 2" "$moe_reference" "$(losses -n 4 "${moe[@]}" --ep 2 --batch-size 2)" || status=1
close "experts, dp 2 x ep 2 x tp 2 (world 4)" "$moe_reference" \
  "$(losses -n 4 "${moe[@]}" --dp 2 --tp 2 --ep 2 --batch-size 4)" || status=1
close "experts, sp dp 2 x ep 2 x tp 2 (world 4)" "$moe_reference" \
  "$(losses -n 4 "${moe[@]}" --dp 2 --tp 2 --ep 2 --batch-size 4 --sequence-parallel)" || status=1
close "experts, dp 2 x ep 2 x pp 2 (world 4)" "$moe_reference" \
  "$(losses -n 4 "${moe[@]}" --dp 2 --pp 2 --ep 2 --batch-size 4 --micro-batches 2)" || status=1
"$rgrun" -n 2 "$gpt" "${small[@]}" "${moe[@]}" --strategy fsdp --save "$dir/moe-ckpt" --max-steps 10 \
  > "$dir/moe-save.log" 2>&1 || { cat "$dir/moe-save.log" >&2; echo "FAILED: experts, fsdp --save" >&2; exit 1; }
close "experts, fsdp 10, ddp resumes" "$moe_reference" "$(losses "${moe[@]}" --resume "$dir/moe-ckpt")" || status=1
close "experts, fsdp 10, ep 2 resumes" "$moe_reference" "$(losses "${moe[@]}" --ep 2 --resume "$dir/moe-ckpt")" || status=1
"$rgrun" -n 2 "$gpt" "${small[@]}" "${moe[@]}" --ep 2 --save "$dir/moe-ep-ckpt" --max-steps 10 \
  > "$dir/moe-ep-save.log" 2>&1 || { cat "$dir/moe-ep-save.log" >&2; echo "FAILED: experts, ep 2 --save" >&2; exit 1; }
close "experts, ep 2 10, one process resumes" "$moe_reference" \
  "$(losses -n 1 "${moe[@]}" --batch-size 8 --resume "$dir/moe-ep-ckpt")" || status=1
# The experts split over ep beside pp and tp: the stages' experts gathered over their ep
# groups into the one-file form, and cut again; in the same layout the uninterrupted run's
# checkpoint, byte for byte.
ep_pipe=(--dp 2 --pp 2 --ep 2 --batch-size 4 --micro-batches 2)
"$rgrun" -n 4 "$gpt" "${small[@]}" "${moe[@]}" "${ep_pipe[@]}" --save "$dir/moe-ep-pp-half" --max-steps 10 \
  > "$dir/moe-ep-pp.log" 2>&1 || { cat "$dir/moe-ep-pp.log" >&2; echo "FAILED: experts, ep 2 x pp 2 --save" >&2; exit 1; }
close "experts, dp 2 x ep 2 x pp 2 10, one process resumes" "$moe_reference" \
  "$(losses -n 1 "${moe[@]}" --batch-size 8 --resume "$dir/moe-ep-pp-half")" || status=1
close "experts, fsdp 10, dp 2 x ep 2 x tp 2 resumes" "$moe_reference" \
  "$(losses -n 4 "${moe[@]}" --dp 2 --tp 2 --ep 2 --batch-size 4 --resume "$dir/moe-ckpt")" || status=1
"$rgrun" -n 4 "$gpt" "${small[@]}" "${moe[@]}" "${ep_pipe[@]}" --resume "$dir/moe-ep-pp-half" \
  --save "$dir/moe-ep-pp-resumed" > "$dir/moe-ep-pp.log" 2>&1 &&
  "$rgrun" -n 4 "$gpt" "${small[@]}" "${moe[@]}" "${ep_pipe[@]}" --save "$dir/moe-ep-pp-whole" \
  > "$dir/moe-ep-pp.log" 2>&1 || { cat "$dir/moe-ep-pp.log" >&2; echo "FAILED: experts, ep 2 x pp 2 --resume" >&2; exit 1; }
if cmp -s "$dir/moe-ep-pp-resumed" "$dir/moe-ep-pp-whole"; then
  echo "experts, dp 2 x ep 2 x pp 2 10 + 10 steps  the uninterrupted run's checkpoint, byte for byte"
else
  echo "FAILED: experts, ep 2 x pp 2 resumed at step 10 ends with another checkpoint than 20 steps straight" >&2
  status=1
fi
[ $status -eq 0 ] || echo "FAILED: a strategy's losses differ from DDP's" >&2
exit $status
