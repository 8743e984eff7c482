#!/usr/bin/env bash
# Issue 11 on two GPUs (nvidia-h200-x2), NCCL, one GPU per rank: DDP jobs (tests/workloads/ddp.py)
# under `tuimon run`, each rank measuring its own truth; tuimon's per-rank numbers beside them.
#   A  a planted straggler: rank 1 spins 30 ms of Python per step (134M parameters, 512 MB of gradients)
#      at its step's end (straggler, straggler_bv); A2 (straggler_gpu): the same model on batches of
#      1024 made ahead (the step is GPU work, not Python), rank 1's batches 20 ms late; A3
#      (straggler_gpukernel): the same, rank 1's GPU runs a 20 ms kernel each step (a slower GPU)
#   B  comm grows: a small model with 0 and then 2 GiB of extra gradient (almost no compute)
#   C  the probe's cost with comm timing on: the job of A without a straggler, plain torchrun vs
#      under `tuimon run`, alternated, the job's own median step time
# From the repo root: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_ranks.sh
# Writes $OUT/ranks_table.txt (and the table last on stdout) and $OUT/ddp_straggler.jsonl (a recording).
source tests/gpu/prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # (the machine's rule: no NVLink multicast)
LOGS=$(mktemp -d)
nvidia-smi -L
RUN="python3 -m torch.distributed.run --nproc-per-node 2 tests/workloads/ddp.py --device cuda $DDP_ARGS"  # (DDP_ARGS=--ddp-stats: DDP's own timings too)

wait_steps() {  # DIR N: until rank 0's truth has N steps
  for _ in $(seq 120); do
    python3 -c "import json,sys; sys.exit(0 if json.load(open('$1/rank0.json'))['steps'] >= $2 else 1)" 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

case_run() {  # NAME ARGS...: the job under tuimon run; attach --once --json after 150 steps
  local name=$1; shift
  local dir=$LOGS/$name; mkdir -p "$dir"
  python3 -m tuimon run --headless -- $RUN --truth "$dir" "$@" > "$dir/job.log" 2>&1 &
  local job=$!
  wait_steps "$dir" 150 || echo "$name: the job did not reach 150 steps" >&2
  if [ "$name" = straggler ]; then
    python3 -m tuimon record $job -o "$OUT/ddp_straggler.jsonl" --seconds 8 \
      --note "DDP on 2 H200s (NCCL), 134M parameters, rank 1 spins 30 ms per step (tests/gpu/check_ranks.sh)" > /dev/null 2>&1
  fi
  python3 -m tuimon attach $job --once --json > "$dir/snap.json" 2> "$dir/attach.err"
  for f in "$dir"/rank*.json; do cp "$f" "$f.at_attach"; done
  wait $job
}

CASES=${CASES:-straggler straggler_bv comm0 comm2g}  # (a shorter run: CASES=straggler ROUNDS=1)
case " $CASES " in *" straggler "*) case_run straggler --width 4096 --layers 8 --batch 64 --slow-rank 1 --slow-ms 30 --seconds ${SECONDS_A:-30};; esac
case " $CASES " in *" aligned "*) case_run aligned --width 4096 --layers 8 --batch 64 --seconds 20;; esac  # A without its straggler
case " $CASES " in *" straggler_bv "*) case_run straggler_bv --width 4096 --layers 8 --batch 64 --slow-rank 1 --slow-ms 30 --bucket-view --seconds ${SECONDS_A:-30};; esac
GPU_JOB="--width 4096 --layers 8 --batch 1024 --batches-ahead --seconds ${SECONDS_A:-30}"
case " $CASES " in *" straggler_gpu "*) case_run straggler_gpu $GPU_JOB --slow-rank 1 --slow-ms 20 --slow-where data;; esac
case " $CASES " in *" straggler_gpukernel "*) case_run straggler_gpukernel $GPU_JOB --slow-rank 1 --slow-ms 20 --slow-how gpu;; esac
case " $CASES " in *" aligned_gpu "*) case_run aligned_gpu $GPU_JOB;; esac
case " $CASES " in *" comm0 "*) case_run comm0 --width 1024 --layers 4 --batch 64 --seconds 20;; esac
case " $CASES " in *" comm2g "*) case_run comm2g --width 1024 --layers 4 --batch 64 --extra-mb 2048 --seconds 20;; esac

for i in $(seq ${ROUNDS:-2}); do  # C: alternated, plain first
  mkdir -p "$LOGS/plain$i" "$LOGS/probe$i"
  $RUN --truth "$LOGS/plain$i" --width 4096 --layers 8 --batch 64 --seconds ${SECONDS_C:-15} > "$LOGS/plain$i/job.log" 2>&1
  python3 -m tuimon run --headless -- $RUN --truth "$LOGS/probe$i" --width 4096 --layers 8 --batch 64 --seconds ${SECONDS_C:-15} \
    > "$LOGS/probe$i/job.log" 2>&1
done

python3 - "$LOGS" <<'PY' | tee "$OUT/ranks_table.txt"
import json, os, statistics, sys
logs = sys.argv[1]

def truth(case, rank, at_attach=True):
    p = os.path.join(logs, case, f"rank{rank}.json" + (".at_attach" if at_attach else ""))
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None

print("== per rank: tuimon (attach --once --json) beside the rank's own timers ==")
print(f"{'case':<10}{'rank':>5}{'step p50 tuimon':>17}{'own step':>10}{'comm ms tuimon':>16}{'own comm':>10}"
      f"{'comm share':>12}{'own share':>11}{'GPU':>5}{'SM %':>6}")
summary = {}
for case in ("straggler", "aligned", "straggler_bv", "straggler_gpu", "straggler_gpukernel", "aligned_gpu", "comm0",
             "comm2g"):
    if not os.path.isdir(os.path.join(logs, case)):
        continue  # (not run: CASES)
    try:
        snap = json.load(open(os.path.join(logs, case, "snap.json")))
    except (OSError, ValueError) as e:
        err = os.path.join(logs, case, "attach.err")
        print(case, "no snapshot:", e, open(err).read()[-300:] if os.path.exists(err) else "")
        continue
    rows = {r["rank"]: r for r in snap.get("ranks", [])}
    for rank in (0, 1):
        r, t = rows.get(rank), truth(case, rank)
        if r is None or t is None:
            print(f"{case:<10}{rank:>5}  missing (tuimon row {r is not None}, truth {t is not None})")
            continue
        print(f"{case:<10}{rank:>5}{r['step_time_ms']['p50']:>17.2f}{t['step_ms']:>10.2f}{(r['comm_ms'] or 0):>16.2f}"
              f"{t['comm_ms']:>10.2f}{(r['comm_share'] or 0):>12.1%}{t['comm_share']:>11.1%}{str(r['gpu']):>5}"
              f"{(r['sm_active'] or 0):>6.0f}")
        if "ddp" in t:
            print(f"{'':<15}DDP's own timer (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in t["ddp"].items())
                  + f"; tuimon's reading of its backward {r.get('ddp_backward_ms')}"
                  + "; tuimon phases (ms) " + ", ".join(f"{k} {v['mean_ms']:.2f}" for k, v in (r.get("phases") or {}).items()))
    summary[case] = snap
    v = snap["verdict"]
    print(f"  verdict: {v['headline']} | {v['evidence']}")
    print(f"  straggler: {snap.get('straggler')} | comm_share {snap.get('comm_share')} | grad MB "
          f"{truth(case, 0)['grad_mb'] if truth(case, 0) else '?'}")

print()
for case in ("straggler", "straggler_bv", "straggler_gpu", "straggler_gpukernel"):  # (_bv: gradient_as_bucket_view=True, no copies into and out of buckets)
    s = summary.get(case, {}).get("straggler")
    t0, t1 = truth(case, 0), truth(case, 1)
    rows = {r["rank"]: r for r in summary.get(case, {}).get("ranks", [])}
    if t0 and t1:
        own_ratio = t1["own_ms"] / t0["own_ms"]
        ends = [truth(case, r, at_attach=False) or {} for r in (0, 1)]
        if all("own_ms_end" in e for e in ends):  # the truth's own work measured again after the job
            end_ratio = ends[1]['own_ms_end'] / ends[0]['own_ms_end']
            print(f"{case}: own work after the job, rank 0 {ends[0]['own_ms_end']:.2f} ms, rank 1 "
                  f"{ends[1]['own_ms_end']:.2f} ms = {end_ratio:.2f}x"
                  + (f" (tuimon {s['ratio'] / end_ratio:.2f} of it)" if s else ""))
        tu_own = {r: rows[r]["step_time_ms"]["p50"] - (rows[r]["comm_ms"] or 0) for r in rows}
        print(f"{case}: truth rank 1 own {t1['own_ms']:.2f} ms vs rank 0 {t0['own_ms']:.2f} ms = {own_ratio:.2f}x; "
              f"tuimon own (p50 - comm) " + " / ".join(f"{tu_own[r]:.2f}" for r in sorted(tu_own)) + "; tuimon: "
              + (f"rank {s['rank']}, {s['ratio']:.2f}x ({s['ratio'] / own_ratio:.2f} of the truth), "
                 f"slower {s.get('slower_ms')}" if s else "none"))
c0, c2 = summary.get("comm0"), summary.get("comm2g")
if c0 and c2:
    print(f"comm share, 0 -> 2 GiB extra gradient: tuimon {c0['comm_share']} -> {c2['comm_share']}; own "
          f"{statistics.mean(truth('comm0', r)['comm_share'] for r in (0, 1)):.3f} -> "
          f"{statistics.mean(truth('comm2g', r)['comm_share'] for r in (0, 1)):.3f}")

print("\n== probe cost with comm timing on: the job's own median step (ms), rank 0 / rank 1 ==")
plain, probe = [], []
for i in range(1, 10):
    for kind, acc in (("plain", plain), ("probe", probe)):
        ts = [truth(f"{kind}{i}", r, at_attach=False) for r in (0, 1)]
        if all(ts):
            acc.append(statistics.mean(t["step_ms"] for t in ts))
            print(f"{kind}{i}: " + " / ".join(f"{t['step_ms']:.3f}" for t in ts))
if plain and probe:
    print(f"probe / plain: {statistics.mean(probe) / statistics.mean(plain):.4f} "
          f"(plain {statistics.mean(plain):.3f} ms, probe {statistics.mean(probe):.3f} ms)")
PY
