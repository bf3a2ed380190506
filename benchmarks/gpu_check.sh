#!/usr/bin/env bash
# trainteam's GPU checks on a lent CUDA machine, as one command from the repository root:
#
#     bash benchmarks/gpu_check.sh              # the real checks (<= 8 minutes on one H100/H200)
#     bash benchmarks/gpu_check.sh --cpu-smoke  # the same code at tiny sizes on a CPU, in .venv
#
# Set-up (not with --cpu-smoke): its own venv (GPU_CHECK_VENV, default /tmp/trainteam-gpu-venv) with
# a CUDA torch from the package registry, pinned (TORCH_SPEC, default torch==2.13.0: the registry's
# Linux wheel of that version is the CUDA build; the project's .venv keeps its CPU build), then the
# project with constraints.txt's pins (torch's line left out), bitsandbytes and liger-kernel.
# flash-attn and vllm are tried last, each under a time cap; a failed or late install is reported
# as skipped, never fatal. Then benchmarks/gpu_check.py runs each part (bf16 124M pretraining with
# MFU, QLoRA SFT of the SmolLM2 fixture, sdpa vs flash_attention_2, Liger off/on, GRPO with vLLM)
# in its own time-boxed process and prints one final line: RESULT {json}.
set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE_S=${GPU_CHECK_DEADLINE_S:-460}   # the whole script, installs included (8 min = 480 s)
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
SETUP="{}"
note() {  # note KEY VALUE: adds to the set-up record shown in RESULT
  SETUP=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d[sys.argv[2]]=sys.argv[3]; print(json.dumps(d))' "$SETUP" "$1" "$2")
}
try_install() {  # try_install NAME CAP_S pip-args...: time-boxed, fails soft
  local name=$1 cap=$2; shift 2
  local budget; budget=$(left); (( budget - 120 < cap )) && cap=$(( budget - 120 ))
  if (( cap < 15 )); then note "$name" "skipped: no time left"; return 1; fi
  if timeout "$cap" "$PY" -m pip install -q "$@" >"/tmp/gpu_check_$name.log" 2>&1; then
    note "$name" "installed"; return 0
  fi
  note "$name" "skipped: pip failed or exceeded ${cap}s ($(tail -n 1 "/tmp/gpu_check_$name.log" | cut -c1-200))"
  return 1
}

if [[ "${1:-}" == "--cpu-smoke" ]]; then
  PY=.venv/bin/python
  [[ -x $PY ]] || make setup
  exec "$PY" benchmarks/gpu_check.py --cpu-smoke --deadline-s 600 --setup '{"venv": ".venv (CPU smoke)"}'
fi

VENV=${GPU_CHECK_VENV:-/tmp/trainteam-gpu-venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PY=$VENV/bin/python
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo 'RESULT {"skipped": "no NVIDIA GPU (nvidia-smi found none); use --cpu-smoke on a CPU"}'
  exit 0
fi
nvidia-smi -L
[[ -x $PY ]] || python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip >/dev/null 2>&1
grep -v '^torch==' constraints.txt > /tmp/gpu_check_constraints.txt
if ! timeout 240 "$PY" -m pip install -q "$TORCH_SPEC"; then
  echo "RESULT {\"skipped\": \"could not install $TORCH_SPEC within 240s\"}"; exit 0
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "RESULT {\"skipped\": \"$TORCH_SPEC installed but torch sees no CUDA device (a CPU wheel?)\"}"; exit 0
fi
note torch "$("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
if ! timeout 180 "$PY" -m pip install -q -c /tmp/gpu_check_constraints.txt -e . ; then
  echo '{"skipped": "the project did not install within 180s"}' | sed 's/^/RESULT /'; exit 0
fi
try_install bitsandbytes 90 bitsandbytes
try_install liger_kernel 60 liger-kernel
: > /tmp/gpu_check_parts.out
run_parts() {  # run_parts PARTS RESERVE_S: the parts, leaving RESERVE_S of the deadline for what follows
  local d=$(( $(left) - $2 )); (( d < 30 )) && d=30
  "$PY" benchmarks/gpu_check.py --parts "$1" --deadline-s "$d" | tee -a /tmp/gpu_check_parts.out | grep -v '^RESULT '
}
run_parts pretrain,qlora,liger 150
# flash-attn ships no wheel on PyPI for most torch versions: building it takes longer than this cap.
try_install flash_attn 45 flash-attn --no-build-isolation
run_parts attention 110
# vllm pins its own torch and may replace this venv's: installed last, for the last part only.
try_install vllm 90 vllm
run_parts grpo_vllm 0
python3 - "$SETUP" "$START" <<'PY'
import json, sys, time
out = {"cpu_smoke": False}
for line in open("/tmp/gpu_check_parts.out"):
    if line.startswith("RESULT "):
        part = json.loads(line[7:])
        part.pop("setup", None), part.pop("cpu_smoke", None), part.pop("seconds", None)
        out.update(part)
for name in ("pretrain", "qlora", "attention", "liger", "grpo_vllm"):
    out.setdefault(name, {"skipped": "did not run (set-up failed or no time left)"})
out["setup"] = json.loads(sys.argv[1])
out["total_seconds"] = round(time.time() - int(sys.argv[2]), 1)
print("RESULT " + json.dumps(out))
PY
