#!/usr/bin/env bash
# The GPU benchmark: one script, at most 8 minutes on one CUDA GPU (an H200), CUDA start-up included.
#
#   bash benchmarks/gpu/gpu.sh            # on the GPU machine: records under benchmarks/results/gpu/
#   bash benchmarks/gpu/gpu.sh --smoke    # the same steps at tiny sizes on the CPU: records in a scratch folder
#
# Steps, each under a time cap (a step that overruns is stopped, the next one runs, and the summary says so):
#   1. the dense bf16 matmul rate and attention kernels as a % of it (benchmarks/gpu/gpu_kernels.py);
#   2. training throughput with MFU, attnlab against nn.Transformer on the same batches, eager and compiled
#      (benchmarks/training/train_throughput.py, bf16 autocast, Transformer-base);
#   3. `attnlab train --preset gpu` for GPU_TRAIN_SECONDS (default 300), its validation BLEU (greedy and beam 4,
#      the 3-10-word multi-reference sources `laptop`'s curve is scored on) and the held-out test BLEU, once
#      (benchmarks/quality/time_to_quality.py --valid-run / --test-run --device cuda);
#   4. decoding that run in big batches, greedy and beam 4, sentences/s by the difference of two input sizes,
#      dynamic cache against the static step (benchmarks/gpu/gpu_decode.py).
# gpu.json records every step's status and seconds, written after each step, so a stopped run keeps what
# finished. Everything printed also goes to $OUT/gpu_results.txt, and the records to $OUT/results/, when $OUT
# is set.
#
# Environment: ATTNLAB_DATA (default data/fra-eng.zip, then ../shared/data/fra-eng.zip, shared/data/fra-eng.zip),
# PYTHON (default .venv/bin/python, then python3), GPU_TRAIN_SECONDS, RUN_DIR (default runs/gpu/gpu-<time>),
# ATTNLAB_RESULTS (where records go; default benchmarks/results/gpu, or a scratch folder with --smoke).
# Data: Tatoeba via manythings.org/anki, CC-BY 2.0 (France).
set -euo pipefail
cd "$(dirname "$0")/../.."

SMOKE=0
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu.sh: unknown argument '$arg' (expected --smoke or nothing)" >&2; exit 2 ;;
  esac
done

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/gpu_results.txt") 2>&1
  TEE_PID=$!
fi
export PYTHONUNBUFFERED=1
START=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - START )) s since start)"; }
run() { echo "+ $*"; "$@"; }

# --- Data
DATA="${ATTNLAB_DATA:-}"
if [ -z "$DATA" ]; then
  for candidate in data/fra-eng.zip ../shared/data/fra-eng.zip shared/data/fra-eng.zip; do
    if [ -f "$candidate" ]; then DATA="$candidate"; break; fi
  done
fi
if [ -z "$DATA" ] || [ ! -f "$DATA" ]; then
  echo "gpu.sh: the English-French corpus was not found (ATTNLAB_DATA='${ATTNLAB_DATA:-}', then" \
       "data/fra-eng.zip, ../shared/data/fra-eng.zip and shared/data/fra-eng.zip). Set ATTNLAB_DATA to fra-eng.zip." >&2
  exit 2
fi

# --- Python: the interpreter this runs under ($PYTHON, as a caller passes its own), else the checkout's .venv
# (`make install`), else python3 (a GPU image's torch). Nothing is created or installed here.
HAS_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then HAS_GPU=1; fi
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
fi
if ! "$PY" -c "import torch, sacrebleu, safetensors, tokenizers" 2>/dev/null; then
  echo "gpu.sh: $PY has no torch (or another of attnlab's core packages); run it with PYTHON=/path/to/python" \
       "of an environment that has them (make install creates .venv)." >&2
  exit 2
fi
if ! "$PY" -c "import attnlab" 2>/dev/null; then
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # attnlab from this checkout, not installed
fi
echo "python: $PY ($("$PY" -c 'import sys; print(sys.executable)'))"

if [ "$SMOKE" = 1 ]; then
  # Smoke figures never land among the measured records.
  export ATTNLAB_RESULTS="${ATTNLAB_RESULTS:-$(mktemp -d "${TMPDIR:-/tmp}/attnlab-gpu-smoke.XXXXXX")}"
else
  export ATTNLAB_RESULTS="${ATTNLAB_RESULTS:-benchmarks/results/gpu}"
fi
mkdir -p "$ATTNLAB_RESULTS"
echo "records: $ATTNLAB_RESULTS"
STATUS="$ATTNLAB_RESULTS/.gpu_steps.tsv"
: > "$STATUS"

# One step under a cap: its status (ok, failed rc, stopped at the cap) and seconds go to gpu.json at once.
capped() {
  local cap="$1" name="$2"; shift 2
  local t0 rc status
  t0=$(date +%s)
  echo "+ (cap ${cap} s) $*"
  set +e
  timeout --kill-after=10 "$cap" "$@"
  rc=$?
  set -e
  case "$rc" in
    0) status=ok ;;
    124|137) status="stopped at the ${cap} s cap" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - t0 ))" "$cap" >> "$STATUS"
  summary
  return 0
}

# gpu.json: the steps so far, the run's BLEU and validation curve; copied with every record to $OUT/results.
summary() {
  "$PY" - "$STATUS" "${RUN_DIR:-}" "$SMOKE" "$(( $(date +%s) - START ))" "$*" <<'EOF' || true
import json, os, sys, torch
sys.path.insert(0, "benchmarks")
from common import write_result
status, run_dir, smoke, elapsed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
rows = [dict(zip(("step", "status", "seconds", "cap (s)"), line.rstrip("\n").split("\t"))) for line in open(status)]
curve = []
log = os.path.join(run_dir, "log.jsonl") if run_dir else ""
if log and os.path.isfile(log):
    events = [json.loads(line) for line in open(log)]
    t0 = next((e["time"] for e in events if e.get("event") == "precision"), events[0]["time"] if events else 0)
    curve = [{"step": e["step"], "seconds since start": round(e["time"] - t0, 1), "valid BLEU (greedy, 500)": round(e["valid_bleu"], 2),
              "valid loss": round(e["valid_loss"], 3), **({"weights": e["weights"]} if "weights" in e else {})}
             for e in events if e.get("event") == "eval"]
device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (smoke)"
tables = [{"title": "`--preset gpu`: validation during its run", "figures": curve}] if curve else []
write_result("benchmarks/gpu/gpu.sh", [a for a in ["--smoke"] if smoke], rows, device=device, wall_s=elapsed,
             command="bash benchmarks/gpu/gpu.sh" + (" --smoke" if smoke else ""),
             title="gpu.sh: the steps of the last run", **({"tables": tables} if tables else {}))
EOF
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/results"; cp "$ATTNLAB_RESULTS"/*.json "$OUT/results/" 2>/dev/null || true; fi
}

step "machine"
echo "command: bash benchmarks/gpu/gpu.sh $*"
if [ "$HAS_GPU" = 1 ]; then nvidia-smi; else echo "nvidia-smi: not available (no NVIDIA GPU here)"; fi
"$PY" - <<'EOF'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"{p.name}: {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, capability {p.major}.{p.minor}; "
          f"SDPA flash enabled {torch.backends.cuda.flash_sdp_enabled()}, bf16 supported {torch.cuda.is_bf16_supported()}")
EOF

RUN_DIR="${RUN_DIR:-runs/gpu/gpu-$(date +%Y%m%d-%H%M%S)}"
if [ "$SMOKE" = 1 ]; then
  DEVICE=cpu
  KERNEL_ARGS=(--smoke)
  THROUGHPUT_ARGS=(--quick --no-book)
  TRAIN_SECONDS="${GPU_TRAIN_SECONDS:-20}"
  # The gpu preset's recipe at a toy size: the same code path, seconds on a CPU.
  TRAIN_ARGS=(--preset gpu --device cpu --num-examples 2000 --precision fp32 --batch-tokens 512
              --set model.num_hiddens=32 --set model.num_heads=2 --set model.num_layers=1
              --set model.ffn_num_hiddens=64 --set data.bpe_vocab_size=300 --checkpoint-every 5 --eval-every 10)
  SCORE_ARGS=(--device cpu --valid-limit 20)
  DECODE_ARGS=(--device cpu --lines 20,60 --steps dynamic,static)
  CAP_KERNELS=120; CAP_THROUGHPUT=120; CAP_TRAIN=240; CAP_SCORE=120; CAP_DECODE=120
else
  if [ "$HAS_GPU" != 1 ] || ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu.sh: no CUDA GPU visible to torch; run 'bash benchmarks/gpu/gpu.sh --smoke' on a CPU machine" >&2
    exit 2
  fi
  DEVICE=cuda
  KERNEL_ARGS=(--budget 35)  # start no masked case after 35 s: the step's cap is 60 s
  # Transformer-base on batches of the gpu preset's size (3,072 pairs of 8-12 tokens, ~30k target tokens),
  # eager against nn.Transformer, and torch.compile(attnlab) in a capped child.
  THROUGHPUT_ARGS=(--device cuda --amp --batch-size 3072 --min-len 8 --max-len 12 --d 512 --heads 8 --layers 6
                   --ffn 2048 --vocab 8000 --steps 8 --warmup 3 --no-book --compile --compile-timeout 35)
  TRAIN_SECONDS="${GPU_TRAIN_SECONDS:-300}"
  TRAIN_ARGS=(--preset gpu --device cuda)
  SCORE_ARGS=(--device cuda)
  DECODE_ARGS=(--device cuda --precision bf16 --lines 1000,10000 --steps dynamic,graphs)
  # About 9 minutes in all, as measured on an H200: ~5 s of start-up, then about 60 + 55 + (300 + ~30 of data, final evaluation
  # and averaging) + 25 + 25 + 40 s. The caps (580 s together) keep any overrun under the device's 10 minutes.
  CAP_KERNELS=60; CAP_THROUGHPUT=55; CAP_TRAIN=$(( TRAIN_SECONDS + 40 )); CAP_SCORE=30; CAP_DECODE=60
fi

step "attention kernels vs the dense matmul rate"
capped "$CAP_KERNELS" kernels "$PY" benchmarks/gpu/gpu_kernels.py "${KERNEL_ARGS[@]}"

step "training throughput: MFU, attnlab vs nn.Transformer, eager and compiled"
capped "$CAP_THROUGHPUT" train_throughput "$PY" benchmarks/training/train_throughput.py "${THROUGHPUT_ARGS[@]}"

step "train --preset gpu for ${TRAIN_SECONDS} s on $DATA -> $RUN_DIR"
capped "$CAP_TRAIN" train "$PY" -m attnlab train --model transformer "${TRAIN_ARGS[@]}" \
  --time-budget "$TRAIN_SECONDS" --data "$DATA" --out "$RUN_DIR" --no-progress

if [ -f "$RUN_DIR/model.safetensors" ]; then
  step "validation BLEU (greedy, beam 4) of the gpu run on laptop's 3-10-word sources"
  capped "$CAP_SCORE" valid_bleu "$PY" benchmarks/quality/time_to_quality.py --valid-run "$RUN_DIR" --preset gpu \
    --record gpu_valid "${SCORE_ARGS[@]}"
  step "held-out test BLEU of the gpu run, once"
  capped "$CAP_SCORE" test_bleu "$PY" benchmarks/quality/time_to_quality.py --test-run "$RUN_DIR" --preset gpu \
    --record gpu_test "${SCORE_ARGS[@]}"
  step "decoding in big batches: greedy and beam 4, dynamic cache vs static step"
  capped "$CAP_DECODE" decode "$PY" benchmarks/gpu/gpu_decode.py --run "$RUN_DIR" "${DECODE_ARGS[@]}"
else
  echo "gpu.sh: $RUN_DIR has no final weights; the BLEU and decoding steps are skipped"
  printf '%s\t%s\t0\t0\n' "valid_bleu, test_bleu, decode" "skipped: no trained run" >> "$STATUS"
fi

step "done"
summary
rm -f "$STATUS"
if [ -n "${TEE_PID:-}" ]; then exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null || true; fi  # let tee finish writing
