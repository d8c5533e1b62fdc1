#!/usr/bin/env bash
# check_gpt_sharded.sh — sharded checkpoint directories (--save DIR/) move between layouts.
#
#   tests/check_gpt_sharded.sh RGRUN GPT CONVERT [ARGS...]
#
# Each rank of a small GPT run writes only the pieces it holds (gpt/sharded_state.h), and
# each rank of the resuming run reads only the pieces it needs, whatever layout wrote them.
# For 11 pairs of layouts (two of them with experts, two in bf16 and fp16) a run saves at step 10 (--max-steps 10) and another layout resumes
# it to step 20: its train and validation losses must be the uninterrupted run's (every
# layout's, within 1e-4: the same computation up to the order of float32 sums). In the same
# layout (pp 2 x tp 2, and fsdp) a run resumed at step 10 ends with the uninterrupted run's
# checkpoint directory, byte for byte; and CONVERT turns a directory into the one file the
# same run writes with --save FILE, byte for byte, and back. ctest: example_gpt_sharded.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RGRUN GPT CONVERT [ARGS...]" >&2; exit 2; }
rgrun=$1 gpt=$2 convert=$3
shift 3
small=(--steps 20 --layers 2 --d-model 64 --heads 4 --seq 64 --batch-size 4 --eval-every 20
       --eval-batches 2 --log-every 10 --sample-length 0 "$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/gpt_losses.sh"  # losses, close

save() {  # NAME WORLD LAYOUT...: 10 steps in the layout, saved to $dir/NAME/
  local name=$1 n=$2
  shift 2
  "$rgrun" -n "$n" "$gpt" "${small[@]}" "$@" --save "$dir/$name/" --max-steps 10 > "$dir/$name.log" 2>&1 ||
    { cat "$dir/$name.log" >&2; echo "FAILED: --save $dir/$name/ under $*" >&2; exit 1; }
}

reference=$(losses --strategy ddp)
echo "ddp, 20 steps straight       train ${reference% *}  val ${reference#* }"
status=0
pp_tp=(--dp 1 --pp 2 --tp 2 --batch-size 8 --micro-batches 4)
save pp2-tp2 4 "${pp_tp[@]}"
save fsdp4 4 --strategy fsdp --batch-size 2
save pp2 2 --dp 1 --pp 2 --batch-size 8 --micro-batches 4
save zero1-tp2 4 --strategy zero1 --dp 2 --tp 2
save one 1 --batch-size 8
save fsdp-cp2 2 --strategy fsdp --dp 1 --cp 2 --batch-size 8
save zero2 2 --strategy zero2
close "pp 2 x tp 2 -> fsdp 4" "$reference" "$(losses -n 4 --strategy fsdp --batch-size 2 --resume "$dir/pp2-tp2")" || status=1
close "fsdp 4 -> tp 2" "$reference" "$(losses --dp 1 --tp 2 --batch-size 8 --resume "$dir/fsdp4")" || status=1
close "pp 2 -> one process" "$reference" "$(losses -n 1 --batch-size 8 --resume "$dir/pp2")" || status=1
close "zero1 dp 2 x tp 2 -> pp 2 x tp 2" "$reference" "$(losses -n 4 "${pp_tp[@]}" --resume "$dir/zero1-tp2")" || status=1
close "one process -> fsdp cp 2" "$reference" "$(losses --strategy fsdp --dp 1 --cp 2 --batch-size 8 --resume "$dir/one")" || status=1
close "fsdp cp 2 -> zero2" "$reference" "$(losses --strategy zero2 --resume "$dir/fsdp-cp2")" || status=1
close "zero2 -> zero1 dp 2 x tp 2" "$reference" "$(losses -n 4 --strategy zero1 --dp 2 --tp 2 --resume "$dir/zero2")" || status=1
# A Mixture of Experts: each ep rank writes its own experts; one process reads them all, and
# fsdp's flat shards hold pieces of every expert.
moe=(--experts 4 --experts-per-token 2 --shared-experts 1 --capacity-factor 1.25 --moe-every 2)
moe_reference=$(losses "${moe[@]}" --strategy ddp)
echo "experts, ddp, 20 steps       train ${moe_reference% *}  val ${moe_reference#* }"
save moe-ep2-pp2 4 "${moe[@]}" --dp 2 --ep 2 --pp 2 --micro-batches 2
close "experts: dp 2 x ep 2 x pp 2 -> fsdp" "$moe_reference" "$(losses "${moe[@]}" --strategy fsdp --resume "$dir/moe-ep2-pp2")" || status=1
save moe-fsdp 2 "${moe[@]}" --strategy fsdp
close "experts: fsdp -> ep 2 x tp 2" "$moe_reference" "$(losses -n 4 "${moe[@]}" --dp 2 --ep 2 --tp 2 --resume "$dir/moe-fsdp")" || status=1
# bf16 (the model in bfloat16, AdamW's float32 master weights placed as their parameter)
# and fp16 (the GradScaler's state in the manifest).
for precision in bf16 fp16; do
  p_reference=$(losses --precision $precision --strategy ddp)
  save $precision-pp2-tp2 4 --precision $precision "${pp_tp[@]}"
  close "$precision: pp 2 x tp 2 -> fsdp" "$p_reference" "$(losses --precision $precision --strategy fsdp --resume "$dir/$precision-pp2-tp2")" || status=1
done

# The same layout: resumed at step 10, the final directory is the uninterrupted run's.
same_layout() {  # NAME WORLD LAYOUT...
  local name=$1 n=$2
  shift 2
  "$rgrun" -n "$n" "$gpt" "${small[@]}" "$@" --resume "$dir/$name" --save "$dir/$name-resumed/" > "$dir/same.log" 2>&1 &&
    "$rgrun" -n "$n" "$gpt" "${small[@]}" "$@" --save "$dir/$name-whole/" > "$dir/same.log" 2>&1 ||
    { cat "$dir/same.log" >&2; echo "FAILED: $name --resume/--save" >&2; exit 1; }
  if diff -r "$dir/$name-resumed" "$dir/$name-whole" > /dev/null; then
    echo "$name 10 + 10 steps: the uninterrupted run's checkpoint directory, byte for byte"
  else
    echo "FAILED: $name resumed at step 10 ends with another checkpoint directory than 20 steps straight" >&2
    status=1
  fi
}
same_layout pp2-tp2 4 "${pp_tp[@]}"
same_layout fsdp4 4 --strategy fsdp --batch-size 2

# The one-file form: the directory converted is the file the same run writes, and back.
"$rgrun" -n 4 "$gpt" "${small[@]}" "${pp_tp[@]}" --save "$dir/pp2-tp2.ckpt" --max-steps 10 > "$dir/file.log" 2>&1 ||
  { cat "$dir/file.log" >&2; echo "FAILED: --save FILE under pp 2 x tp 2" >&2; exit 1; }
"$convert" "$dir/pp2-tp2" "$dir/converted.ckpt" && "$convert" "$dir/converted.ckpt" "$dir/back/" &&
  "$convert" "$dir/back" "$dir/again.ckpt" || { echo "FAILED: $convert" >&2; exit 1; }
if cmp -s "$dir/converted.ckpt" "$dir/pp2-tp2.ckpt" && cmp -s "$dir/again.ckpt" "$dir/pp2-tp2.ckpt"; then
  echo "pp 2 x tp 2 directory -> one file -> directory -> one file: the file --save FILE writes, byte for byte"
else
  echo "FAILED: the converted directory is not the file --save FILE writes" >&2
  status=1
fi
[ $status = 0 ] && echo "PASSED"
exit $status
