#!/usr/bin/env bash
# The checks a lent GPU machine is for, as one script: a GPU is at hand for minutes, so
# nothing here is exploration. Writes every log to $OUT (default bench/output/gpu).
#
#   bash bench/gpu_check.sh quick   # CUDA tests, the batch loop plain and recorded (~2 min)
#   bash bench/gpu_check.sh full    # quick, then bench_gpu.py on every graph with PBG 1.0
#
# PBG 1.0 comes from wheels in .whl/ (torchbiggraph-1.0.0 and setuptools<81, whose
# pkg_resources PBG needs), installed beside the machine's torch.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-quick}
out=${OUT:-bench/output/gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD/trainer PYTHONUNBUFFERED=1

run() {  # run NAME SECONDS COMMAND...: its output to the terminal and to $out/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    local started=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, \
torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
run build 120 python3 setup.py build_ext --inplace -q
run tests 240 python3 -m pytest -q -p no:cacheprovider \
    tests/trainer/training/test_recorded_steps.py tests/trainer/training/test_device_training.py \
    tests/trainer/model/test_model_device_step.py
run loop 240 python3 bench/bench_recorded_steps.py --device cuda --edges 400000 --repeats 1 \
    --profile
[ "$stage" = full ] || exit 0

python3 -m venv --system-site-packages /tmp/pbg
/tmp/pbg/bin/python -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
run bench_gpu 420 python3 bench/bench_gpu.py --pbg-python /tmp/pbg/bin/python \
    --workers "$(nproc)" --partition-cache-gb 8
