#!/usr/bin/env bash
# The checks a lent GPU machine is for, as one script: a GPU is at hand for minutes, so
# nothing here is exploration. Writes every log to $OUT (default bench/output/gpu).
#
#   bash bench/gpu_check.sh quick [SECS]    # CUDA tests, then the GPU's three runs alone
#   bash bench/gpu_check.sh full [SECS]     # bench_gpu.py on the three graphs, the GPU beside
#                                           # the CPU and PBG 1.0, then start-up's parts
#   bash bench/gpu_check.sh loop [SECS]     # the batch loop, plain and recorded
#   bash bench/gpu_check.sh profile [SECS]  # the GPU's runs alone, then where the
#                                           # 8-partition run's host time goes, by function
#
# Every stage stops by SECS (540). PBG 1.0 comes from wheels in .whl/ (torchbiggraph-1.0.0
# and setuptools<81, whose pkg_resources PBG needs), installed beside the machine's torch.
# Each stage's output is in its own log, and bench_gpu.py prints each row as it ends, so a
# stage cut short by the deadline keeps what it measured. $OUT takes at most eight files:
# the Tessera runs' JSON logs (their summaries split the time) go into one archive.
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

keep_run_logs() {
    tar -czf "$out/run_logs.tgz" bench/output/runs/*/tessera*/train_0.log 2>/dev/null
}

kg_graph=(--graphs kg --kg-edges 250000 --kg-nodes 200000)
large_graph=(--graphs large --partition-cache-gb 8 --background-io)

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, \
torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
run build 120 python3 setup.py build_ext --inplace -q

case $stage in
quick|profile)
    if [ "$stage" = quick ]; then
        run tests 200 python3 -m pytest -q -p no:cacheprovider \
            tests/trainer/training/test_device_training.py \
            tests/trainer/training/test_recorded_steps.py \
            tests/trainer/model/test_model_device_step.py \
            tests/trainer/training/test_background_checkpoints.py
    fi
    run gpu_large 150 python3 bench/bench_gpu.py "${large_graph[@]}" --gpu-only
    run gpu_default 60 python3 bench/bench_gpu.py --graphs default --gpu-only
    run gpu_kg 60 python3 bench/bench_gpu.py "${kg_graph[@]}" --gpu-only
    keep_run_logs
    if [ "$stage" = profile ]; then
        large=$(ls bench/output/runs/*/tessera-gpu_p8/config.json | head -1)
        run profile_large 90 python3 bench/profile_gpu.py "$large" --python --rows 60
        kg=$(ls bench/output/runs/*_r*/tessera-gpu*/config.json | head -1)
        run profile_kg 60 python3 bench/profile_gpu.py "$kg" --python --rows 40
    fi
    ;;
loop)
    run loop 240 python3 bench/bench_recorded_steps.py --device cuda --edges 400000 \
        --repeats 1 --tf32 --profile kg:1000 default:100000 --profile-rows 12
    ;;
full)
    # PBG beside the machine's own packages: its console scripts in /tmp/pbg/bin run this
    # python3, which finds torchbiggraph (and its pkg_resources) on the PYTHONPATH.
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pbg .whl/*.whl
    export PYTHONPATH=$PYTHONPATH:/tmp/pbg
    side_by_side=(--pbg-python /tmp/pbg/bin/python --workers "$(nproc)")
    run bench_kg 200 python3 bench/bench_gpu.py "${kg_graph[@]}" "${side_by_side[@]}"
    run bench_default 150 python3 bench/bench_gpu.py --graphs default "${side_by_side[@]}"
    run startup 60 python3 bench/bench_startup.py --device cuda --repeats 2
    # PBG last: on 10M edges it is the longest run, and the deadline may cut it.
    run bench_large 400 python3 bench/bench_gpu.py "${large_graph[@]}" "${side_by_side[@]}"
    keep_run_logs
    ;;
*)
    echo "unknown stage $stage: quick, full, loop or profile" >&2
    exit 64
    ;;
esac
