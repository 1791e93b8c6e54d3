# Session 21, call 8: the peer's NVML telemetry (bench/peers/nvml_power.py, new) on the GPU, and the acceptance script's
# new ratio table (bench/train_ratios.py): the host test of nvml_power on a machine with NVML (its measured branch),
# then `bench/train_acceptance.sh 8b` (trainbench default and selective recompute, torch bf16 and fp32 state), which now
# ends with every run's ratios to the peers. Prediction: as call 1 (1.01x / 1.09x, memory 0.93); the peer's energy per
# token within a few % of trainbench's 0.019 J, its SM clock ~1620 MHz against ~1550.
set -u
source bench/gpu_env.sh
carry/tests/nvml_power_host_test --gtest_brief=0 2>&1 | tail -4
bash bench/train_acceptance.sh 8b > /dev/null 2>&1
echo "exit $?"
sed -n '/### ratios/,$p' "$OUT/train.log"
grep -h '"telemetry"' "$OUT/peers.jsonl" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print(d['state'], 'step %.1f ms' % (1e3 * d['step_s']['median']), json.dumps(d['telemetry']), d.get('energy_j_per_token'))"
