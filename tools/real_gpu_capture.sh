#!/usr/bin/env bash
# Records what a real NVIDIA GPU shows the collector, for docs/real_gpu.md and tests/fixtures/real_gpu/:
#   survey.jsonl        every NVML call the sampler makes (and a few it could), answered or refused, timed
#   probe_{idle,busy}   tools.nvml_probe's summary: fields always null, cost per sample, NVML failures
#   {idle,busy}.parquet `faultlens collect --no-kernel --duration SECONDS` recorded by `faultlens record`
#   smi_*               nvidia-smi in the same run: -q snapshots and a 1 s CSV of the same fields
# "busy" runs a torch bf16 matmul loop on every GPU while it samples (needs a CUDA torch).
#
#   bash tools/real_gpu_capture.sh OUTDIR [SECONDS]        (from the repository root, on the GPU node)
set -u
out=${1:?usage: real_gpu_capture.sh OUTDIR [SECONDS]}
secs=${2:-60}
py=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export FAULTLENS_HOME="$out/home" PYTHONUNBUFFERED=1
node=$(hostname)

fields=timestamp,index,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw
fields=$fields,enforced.power.limit,clocks.sm,clocks.mem,clocks.max.sm,clocks_event_reasons.active
fields=$fields,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total
fields=$fields,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total
fields=$fields,retired_pages.pending,remapped_rows.correctable,remapped_rows.uncorrectable
fields=$fields,remapped_rows.pending,remapped_rows.failure
# An older nvidia-smi refuses the whole query for one unknown field: fall back to the basics.
if nvidia-smi --query-gpu="$fields" --format=csv -c 1 2>&1 | grep -qi "not a valid field"; then
  fields=timestamp,index,uuid,utilization.gpu,memory.used,temperature.gpu,power.draw,clocks.sm,clocks.mem
fi

{ uname -a; nvidia-smi; nvidia-smi -q; nvidia-smi nvlink -s; nvidia-smi nvlink -e; nvidia-smi --help-query-gpu; } \
  > "$out/smi_info.txt" 2>&1
"$py" -c 'import pynvml, sys; print(sys.version); print(pynvml.__file__)' > "$out/versions.txt" 2>&1
"$py" -m pip show nvidia-ml-py >> "$out/versions.txt" 2>&1
"$py" -m tools.nvml_survey > "$out/survey.jsonl" 2> "$out/survey.err"
echo "survey: $(wc -l < "$out/survey.jsonl") calls"

"$py" -m faultlens broker > "$out/broker.json" 2> "$out/broker.err" &
broker=$!
for _ in $(seq 60); do [ -s "$out/broker.json" ] && break; sleep 0.5; done
echo "broker: $(cat "$out/broker.json")"

phase() {
  local name=$1
  nvidia-smi --query-gpu="$fields" --format=csv,nounits -lms 1000 > "$out/smi_$name.csv" 2>&1 &
  local smi=$!
  "$py" -m tools.nvml_probe --seconds 15 --quiet > "$out/probe_$name.json" 2> "$out/probe_$name.err"
  "$py" -m tools.nvml_probe --seconds 15 --quiet --no-cache > "$out/probe_${name}_nocache.json" 2>> "$out/probe_$name.err"
  "$py" -m faultlens collect --job "real-$name" --node "$node" --no-kernel --interval 1 --duration "$secs" \
    > "$out/collect_$name.jsonl" 2> "$out/collect_$name.err" &
  local collect=$!
  sleep $(( secs / 2 ))
  nvidia-smi -q > "$out/smi_q_$name.txt" 2>&1
  wait $collect
  kill $smi
  "$py" -m faultlens record --job "real-$name" --out "$out/$name.parquet" --idle 3 --no-progress \
    > "$out/record_$name.json" 2> "$out/record_$name.err"
  echo "$name: $(cat "$out/record_$name.json")"
}

phase idle
"$py" - "$((secs + 40))" > "$out/load.txt" 2>&1 <<'PY' &
import sys, time
import torch
end = time.time() + float(sys.argv[1])
mats = [torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16) for i in range(torch.cuda.device_count())]
n = 0
while time.time() < end:
    for m in mats:
        m @ m
    n += 1
    if n % 50 == 0:
        torch.cuda.synchronize()
print(f"{n} rounds of {len(mats)} matmuls of 8192^3 bf16", flush=True)
PY
load=$!
sleep 5
phase busy
wait $load
kill $broker
wait
ls -la "$out"
