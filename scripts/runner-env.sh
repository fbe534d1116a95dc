# Sourced by the scripts that run on a self-hosted GPU runner (nightly-shard.sh,
# vllm-candidate.sh): the GPUs and the lock file of this runner service.
#
# Two runner services on one box must each see their own GPUs and take their own lock
# (docs/gpu-and-ci.md, "What the self-hosted runner must be set to"). The runner service's
# own environment wins — its .env file (the runner application exports it to every job),
# where each service names its CUDA_VISIBLE_DEVICES and SPECPERF_GPU_LOCK. Else the
# repository variables SPECPERF_CUDA_VISIBLE_DEVICES and SPECPERF_GPU_LOCK, which the
# workflow passes as SPECPERF_VAR_* (a box with one runner service). Neither: every GPU
# the driver shows, and the default lock file (/tmp/specperf-gpu.lock).
if [[ -z "${CUDA_VISIBLE_DEVICES+set}" && -n "${SPECPERF_VAR_CUDA_VISIBLE_DEVICES:-}" ]]; then
    export CUDA_VISIBLE_DEVICES="$SPECPERF_VAR_CUDA_VISIBLE_DEVICES"
    devices_from="repository variable SPECPERF_CUDA_VISIBLE_DEVICES"
elif [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
    devices_from="the runner service's environment"
else
    devices_from="not set: every GPU nvidia-smi lists"
fi
if [[ -z "${SPECPERF_GPU_LOCK:-}" && -n "${SPECPERF_VAR_GPU_LOCK:-}" ]]; then
    export SPECPERF_GPU_LOCK="$SPECPERF_VAR_GPU_LOCK"
    lock_from="repository variable SPECPERF_GPU_LOCK"
elif [[ -n "${SPECPERF_GPU_LOCK:-}" ]]; then
    lock_from="the runner service's environment"
else
    lock_from="not set: the default /tmp/specperf-gpu.lock"
fi
echo "specperf: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-} ($devices_from);" \
     "SPECPERF_GPU_LOCK=${SPECPERF_GPU_LOCK-} ($lock_from)"
