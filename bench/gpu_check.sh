#!/usr/bin/env bash
# The checks a lent GPU machine is for, as one script: a GPU is at hand for minutes, so
# nothing here is exploration. Writes every log to $OUT (default bench/output/gpu).
#
#   bash bench/gpu_check.sh quick        # CUDA tests, the batch loop plain and recorded (~1 min)
#   bash bench/gpu_check.sh full [SECS]  # the loop, then bench_gpu.py on the three graphs
#                                        # with PBG 1.0, stopping every stage by SECS (540)
#   bash bench/gpu_check.sh profile [SECS]  # the GPU's runs alone, then where the
#                                        # 8-partition run's host time goes, by function
#
# PBG 1.0 comes from wheels in .whl/ (torchbiggraph-1.0.0 and setuptools<81, whose
# pkg_resources PBG needs), installed beside the machine's torch. Each stage's output is in
# its own log, and bench_gpu.py prints each row as it ends, so a stage cut short by the
# deadline keeps what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-quick}
deadline=${2:-540}
out=${OUT:-bench/output/gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD/trainer PYTHONUNBUFFERED=1

run() {  # run NAME SECONDS COMMAND...: output to the terminal and $out/NAME.log, in time
    local name=$1 limit=$2
    shift 2
    local left=$((deadline - SECONDS))
    if [ "$left" -lt 10 ]; then echo "== $name: skipped, the deadline is near"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (at most $limit s): $*"
    local started=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, \
torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
run build 120 python3 setup.py build_ext --inplace -q
keep_run_logs() {  # the Tessera runs' JSON logs (their summaries split the time), in one file
    tar -czf "$out/run_logs.tgz" bench/output/runs/*/tessera*/train_0.log 2>/dev/null
}
if [ "$stage" = profile ]; then
    run bench_large 150 python3 bench/bench_gpu.py --graphs large --partition-cache-gb 8 \
        --background-io --gpu-only
    run bench_default 60 python3 bench/bench_gpu.py --graphs default --gpu-only
    run bench_kg 60 python3 bench/bench_gpu.py --graphs kg --kg-edges 250000 \
        --kg-nodes 200000 --gpu-only
    keep_run_logs
    large=$(ls bench/output/runs/*/tessera-gpu_p8/config.json | head -1)
    run profile_large 90 python3 bench/profile_gpu.py "$large" --python --rows 60
    kg=$(ls bench/output/runs/*_r*/tessera-gpu*/config.json | head -1)
    run profile_kg 60 python3 bench/profile_gpu.py "$kg" --python --rows 40
    exit 0
fi
if [ "$stage" = quick ]; then
    run tests 240 python3 -m pytest -q -p no:cacheprovider \
        tests/trainer/training/test_recorded_steps.py \
        tests/trainer/training/test_device_training.py tests/trainer/model/test_model_device_step.py \
        tests/trainer/training/test_background_checkpoints.py
    run loop 240 python3 bench/bench_recorded_steps.py --device cuda --edges 400000 \
        --repeats 1 --profile kg:1000 default:1000
    exit 0
fi

run tests 120 python3 -m pytest -q -p no:cacheprovider \
    tests/trainer/training/test_recorded_steps.py
run loop 150 python3 bench/bench_recorded_steps.py --device cuda --edges 400000 --repeats 1 \
    --tf32 --profile kg:1000 default:100000 --profile-rows 12
# PBG beside the machine's own packages: its console scripts in /tmp/pbg/bin run this
# python3, which finds torchbiggraph (and its pkg_resources) on the PYTHONPATH.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pbg .whl/*.whl
export PYTHONPATH=$PYTHONPATH:/tmp/pbg
pbg="--pbg-python /tmp/pbg/bin/python"  # only its folder is used
workers="--workers $(nproc)"
# shellcheck disable=SC2086
run bench_kg 200 python3 bench/bench_gpu.py --graphs kg --kg-edges 250000 --kg-nodes 200000 \
    $pbg $workers
# shellcheck disable=SC2086
run bench_default 150 python3 bench/bench_gpu.py --graphs default $pbg $workers
# The GPU alone at ten times the batch: its speed, and what it costs in quality.
run bench_kg_10k 60 python3 bench/bench_gpu.py --graphs kg --kg-edges 250000 \
    --kg-nodes 200000 --gpu-only --kg-gpu-batch-size 10000
# PBG last: on 10M edges it is the longest run, and the deadline may cut it.
# shellcheck disable=SC2086
run bench_large 400 python3 bench/bench_gpu.py --graphs large --partition-cache-gb 8 \
    --background-io $pbg $workers
# The Tessera runs' JSON logs (their summaries split the time), for the next session: $OUT
# takes at most eight files.
keep_run_logs
