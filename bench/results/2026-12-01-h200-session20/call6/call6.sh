# Session 20, call 6: the vector cast kernel (call 5's build) against the HEAD build where the noise of step medians
# (p10-p90 ~6 ms) cannot hide it: the replayed steps' kernels by op (CUPTI trace, bench/kernel_busy.py --by-op) of the
# fastest FP8 row in both builds, the cast-type kernels by name; then the step alternating new / old three times each
# with the torch BF16 peer at the start and the end. Prediction (call 5's eager op profile: -1.3 ms over the cast-type
# ops): the replayed step's cast-type kernels ~14.3 -> ~12.5 ms, the step -1.5 to -2 ms, 1.57-1.59x the peer.
set -u
source bench/gpu_env.sh
python3 -c "import tarfile; tarfile.open('carry/bins.tar.xz').extractall('carry')"
s8="--model llama3.1-8b --layers 8 --seq 8192"
best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16"
casts() {  # the cast-type kernels of replays 2-9 by kernel template and source, ms per replay
  python3 - "$1" <<'PY'
import csv, re, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
launches = sorted((int(r['start_ns']), r['correlation']) for r in rows if r['kind'] == 'graph_launch')
by_corr = collections.defaultdict(list)
for r in rows:
    if r['kind'] == 'kernel': by_corr[r['correlation']].append(r)
reps = [c for _, c in launches if by_corr[c]][2:10]
t = collections.Counter()
for c in reps:
    for r in by_corr[c]:
        n = r['name']
        if not re.search(r'cast|Source', n): continue
        key = re.sub(r'.*?(cast_transpose\w*?kernel|cast_kernel).*', r'\1', n) + ' '
        src = re.findall(r'(Bf16|SwigluBackward|Swiglu|SoftmaxGrad|Norm|MapBackward|Map|AdamW)Source', n)
        key += (src[0] if src else '') + (' e5m2' if 't1E' in n else ' e4m3')
        t[key] += (int(r['end_ns']) - int(r['start_ns'])) / 1e6 / len(reps)
for k, v in t.most_common(): print(f'  {v:7.3f} ms  {k}')
print(f'  {sum(t.values()):7.3f} ms  all cast-type kernels (mean of {len(reps)} replays)')
PY
}
for b in new old; do
  bin=carry/trainbench; [ $b = old ] && bin=carry/trainbench-old
  echo "### trace $b"
  CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
    KERNEL_TRACE_OUT=$OUT/trace-$b.csv $bin train $s8 $best --steps 12 --warmup-steps 4 --no-op-profile \
    --out "$OUT/results/trace-$b" > "$OUT/trace-$b.log" 2>&1
  echo "exit $?"
  grep -E "^summary" "$OUT/trace-$b.log"
  python3 bench/kernel_busy.py "$OUT/trace-$b.csv" --by-op | tail -11
  casts "$OUT/trace-$b.csv"
  gzip "$OUT/trace-$b.csv"
done
peer() {
  echo "### torch"
  python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/peer$1.json" 2> "$OUT/peer$1.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch %.1f ms' % (8192e3 / d['tokens_per_s']))" "$OUT/peer$1.json"
}
run() {  # run NAME BINARY
  echo "### $1"
  $2 train $s8 $best --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results/$1" > "$OUT/$1.log" 2>&1
  echo "exit $? $(grep -E '^summary' "$OUT/$1.log")"
}
peer 1
for i in 1 2 3; do run new-$i carry/trainbench; run old-$i carry/trainbench-old; done
peer 2
rm -rf "$OUT/results"
